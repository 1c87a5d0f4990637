//! The epoch-heartbeat member: what every group protocol with a member epoch and one heartbeat
//! API has in common (KIP-848 consumer groups, KIP-1071 streams groups), over the shared
//! `Shell`. A protocol supplies only what is its own through [`EpochProtocol`]; the
//! members are [`ConsumerMember`](crate::machine::consumer::ConsumerMember) and
//! [`StreamsMember`](crate::machine::streams::StreamsMember).
//!
//! The generic member owns:
//! - identity: the KIP-1082 member id, generated once and sent on every heartbeat; the member
//!   epoch: 0 joins, -1 leaves, -2 leaves a static member (the broker keeps its assignment for
//!   a return within the session timeout);
//! - the bounded UNRELEASED_INSTANCE_ID recovery of a static member whose own earlier join may
//!   hold its instance id;
//! - leave and close (the leave waits for an outstanding revocation ticket), fencing
//!   (partitions lost, rejoin at epoch 0 with the same id), the poll timeout;
//! - heartbeat gating (one regular heartbeat in flight, urgent ones while joining or
//!   acknowledging, KIP-580 backoff), and the one error table of the heartbeat answers;
//! - the revocation ticket's phase, and the membership lease.
//!
//! What a protocol does not have costs it nothing: a protocol without static membership refuses
//! an instance id in [`EpochProtocol::validate`] (so no -2 and no UNRELEASED_INSTANCE_ID path is
//! ever taken), one without a revocation step never starts one in its
//! [`reconcile`](EpochProtocol::reconcile), and the rebalance timeout is a field of the
//! protocol's own request.

use std::collections::BTreeSet;
use std::fmt;
use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

use crate::config::GroupConfig;
use crate::error::{
    ApiMisuse, ConfigError, ErrorAction, GroupError, TransportError, classify, codes,
};
use kafka_protocol::messages::RequestKind;

use crate::machine::TopicPartition;
use crate::machine::events::{
    CloseOptions, CommitError, CommitId, CommitOffset, Event, MemberState, Reason, RevokeTicket,
};
use crate::machine::offsets::{Fence, Hint, Protocol, SentOffsets};
use crate::machine::session;
use crate::machine::shell::{PhaseName, Shell, Skeleton, epoch_lease_bound, phases};
use crate::machine::timer::{Timer, after};
use crate::machine::topic_ids::IdAssignment;
use crate::member_id::MemberId;
use crate::request::{
    Api, Broker, Outbound, Reply, Request, RequestId, Response, ResponseBody, Target,
};

/// How often a static member recovers from UNRELEASED_INSTANCE_ID caused by its own earlier join
/// before it gives up.
pub const UNRELEASED_RECOVERIES: u32 = 3;

/// OffsetCommit / OffsetFetch v9 are the first an epoch-protocol member may use (the
/// coordinator refuses older ones from consumer and streams members: UNSUPPORTED_VERSION in
/// ConsumerGroup / StreamsGroup.validateOffsetCommit); names, not topic ids.
const COMMIT_VERSIONS: std::ops::RangeInclusive<i16> = 9..=9;
const FETCH_VERSIONS: std::ops::RangeInclusive<i16> = 9..=9;
/// Epochs with a meaning of their own (ConsumerGroupHeartbeatRequest.json,
/// StreamsGroupHeartbeatRequest.json, ShareGroupHeartbeatRequest.json).
const LEAVE_EPOCH: i32 = -1;
const STATIC_LEAVE_EPOCH: i32 = -2;

/// What one epoch-heartbeat protocol supplies to [`EpochMember`]: its request and answer, its
/// assignment, its join fields, its own errors and events. Every hook takes the whole member,
/// whose protocol state is `m.proto` (the implementing type itself).
pub trait EpochProtocol: Sized + fmt::Debug {
    /// The group configs naming the group's session timeout.
    const SESSION: session::Keys;
    /// What the member records of a heartbeat it sent (what it listed as owned).
    type Heartbeat: Clone + fmt::Debug;
    /// What a revocation ticket covers.
    type Revoking: Clone + fmt::Debug;
    /// The heartbeat answer.
    type Answer: EpochAnswer;

    /// Checks the protocol's own settings when the member is built (after the group config).
    fn validate(&self, _config: &GroupConfig) -> Result<(), ConfigError> {
        Ok(())
    }
    /// The heartbeat answer in `response`, if it is one.
    fn decode(response: Response) -> Option<Self::Answer> {
        Self::Answer::from_body(response.body)
    }
    /// The error code of the heartbeat answer in `response`, if it is one.
    fn error_code(response: &Response) -> Option<i16> {
        Self::Answer::in_body(&response.body).map(EpochAnswer::error_code)
    }
    /// The terminal error of a coordinator that does not speak the protocol.
    fn unsupported() -> GroupError;
    /// An error code of the protocol's own, terminal, read before the shared error table.
    fn own_error(_m: &EpochMember<Self>, _answer: &Self::Answer) -> Option<GroupError> {
        None
    }
    /// The regular heartbeat at the member's epoch: full at epoch 0 (the join fields), else
    /// what changed since the broker last heard.
    fn heartbeat(m: &mut EpochMember<Self>) -> (Request, Self::Heartbeat);
    /// The leave heartbeat at `epoch` (-1 or -2).
    fn leave(m: &EpochMember<Self>, epoch: i32) -> Request;
    /// Whether a heartbeat listed what the member owns.
    fn reported_owned(sent: &Self::Heartbeat) -> bool;
    /// An error-free answer with a member epoch of 0 or more, for this member: the protocol
    /// checks its fields, calls `EpochMember::accept` and records the new target.
    fn answered(m: &mut EpochMember<Self>, sent_epoch: i32, sent: Self::Heartbeat, a: Self::Answer);
    /// Moves the assignment towards the target: revoke first (with a ticket, see
    /// `EpochMember::start_revocation`), then assign, then acknowledge.
    fn reconcile(m: &mut EpochMember<Self>);
    /// Whether a target assignment is known (by default, that of [`ids`](Self::ids)).
    fn has_target(&self) -> bool {
        self.ids().is_some_and(|ids| ids.target.is_some())
    }
    /// The broker's view of the member is unknown now: the next heartbeat is full (`refused`:
    /// an answer with an error, else a failure in the transport).
    fn forget_sent(&mut self, refused: bool);
    /// A new membership starts (join, leave): no target, nothing sent (by default: the sent
    /// fields forgotten, and the target of [`ids`](Self::ids)).
    fn reset(&mut self) {
        self.forget_sent(false);
        if let Some(ids) = self.ids_mut() {
            ids.target = None;
        }
    }
    /// Whether the application still wants to be in the group (a leave then rejoins).
    fn subscribed(&self) -> bool;
    /// The application left the subscription (unsubscribe, close).
    fn unsubscribed(&mut self);
    /// The ticket came back: what it covered is released.
    fn revoked(m: &mut EpochMember<Self>, revoking: Self::Revoking);
    /// A leave waits for a ticket: everything but what it covers is released now.
    fn release_except(m: &mut EpochMember<Self>, revoking: &Self::Revoking);

    /// Gives up what the application holds; returns its partitions.
    fn take_owned(_m: &mut EpochMember<Self>) -> Vec<TopicPartition> {
        Vec::new()
    }
    /// Everything the application holds is lost (fenced, stopped, poll timeout).
    fn lose(m: &mut EpochMember<Self>, reason: Reason) {
        let partitions = Self::take_owned(m);
        m.shell.report_lost(partitions, reason);
    }
    /// The application gives up everything it holds (close, unsubscribe).
    fn release(m: &mut EpochMember<Self>) {
        let partitions = Self::take_owned(m);
        m.shell.report_revoked(partitions);
    }
    /// The partitions the member may commit now.
    fn committable(_m: &EpochMember<Self>) -> BTreeSet<TopicPartition> {
        BTreeSet::new()
    }
    /// The first step of a command from the application at `now`.
    fn command(m: &mut EpochMember<Self>, now: Instant) {
        m.shell.advance(now);
    }
    /// After every answer: the protocol's own follow-up.
    fn settle(_m: &mut EpochMember<Self>) {}
    /// After an answer to no request of this member.
    fn unrouted(_m: &mut EpochMember<Self>) {}
    /// After the shared timers fired: the protocol's own.
    fn on_timers(_m: &mut EpochMember<Self>) {}
    /// A timer due at once, whatever the table says.
    fn urgent_timer(_m: &EpochMember<Self>) -> Option<Timer> {
        None
    }
    /// Whether the member acts on `timer` now (the shared ones are decided before).
    fn acts_on(_m: &EpochMember<Self>, _timer: Timer) -> bool {
        true
    }
    /// The member's assignment by topic id, for a protocol that assigns by id: the member then
    /// asks Metadata for the topic names itself (`topic_ids`).
    fn ids(&self) -> Option<&IdAssignment> {
        None
    }
    /// As [`ids`](Self::ids), to change.
    fn ids_mut(&mut self) -> Option<&mut IdAssignment> {
        None
    }
    /// The topics a Metadata request for topic names asks for (`None`: every topic).
    fn metadata_topics(&self) -> Option<Vec<String>> {
        None
    }
    /// The member closes: what the protocol lets go of.
    fn closed(_m: &mut EpochMember<Self>) {}
    /// The request that reads the coordinator's record of this member, for a protocol whose
    /// coordinator sends the assignment only on a join or when the member's own heartbeat
    /// changed it (KIP-1071 streams groups): a lost answer would leave the member with a stale
    /// target for good. After a heartbeat at a positive epoch whose outcome is unknown (no
    /// answer, or an error a processed write can be answered with) the member sends it before
    /// its next heartbeat. `None` (the default): the protocol's next full heartbeat suffices.
    fn read_back(_m: &EpochMember<Self>) -> Option<Request> {
        None
    }
    /// What the answer to [`read_back`](Self::read_back) says of this member.
    fn read_back_answer(
        _m: &EpochMember<Self>,
        _response: Response,
    ) -> ReadBack<Self::Answer, Self::Heartbeat> {
        ReadBack::Done
    }
    /// A request of the protocol's own to `coordinator` besides the heartbeat (the streams
    /// member's KIP-1331 topology description push), asked for in every `poll_request` while
    /// the member is in the group with an epoch and no leave is due: the protocol sends it
    /// (recorded as a side request, whose outcome comes back to
    /// [`side_answer`](Self::side_answer)) and returns its id. `None` (the default):
    /// nothing to send.
    fn side_request(_m: &mut EpochMember<Self>, _coordinator: &Broker) -> Option<RequestId> {
        None
    }
    /// The outcome of a request [`side_request`](Self::side_request) sent as `id`, whatever the
    /// member did since.
    fn side_answer(_m: &mut EpochMember<Self>, _id: RequestId, _result: Reply) {}
}

/// What a member learns by reading the coordinator's record of itself back after a heartbeat
/// answer was lost ([`EpochProtocol::read_back`]).
#[derive(Debug)]
pub enum ReadBack<A, H> {
    /// The record, as the lost answer would have carried it (member epoch and assignment), and
    /// what that synthetic answer's heartbeat is recorded as having listed.
    Record(A, H),
    /// The coordinator could not answer now (moved, loading): read again after the backoff.
    Retry,
    /// Nothing to learn (the member is not in the record, or the read is refused): heartbeat on.
    Done,
}

/// Where a member is in reading its record back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum ReadBackState {
    #[default]
    Idle,
    /// Due before the next heartbeat.
    Due,
    InFlight,
}

/// The fields every epoch-heartbeat answer has.
pub trait EpochAnswer: Sized {
    /// The heartbeat API, as errors name it.
    const API: Api;
    /// The answer `body` is, if it is one of this type.
    fn from_body(body: ResponseBody) -> Option<Self>;
    /// The answer `body` holds, if it is one of this type.
    fn in_body(body: &ResponseBody) -> Option<&Self>;
    /// The error code.
    fn error_code(&self) -> i16;
    /// The error message, if any.
    fn error_message(&self) -> Option<&str>;
    /// The member id the coordinator answered for, if it named one.
    fn member_id(&self) -> Option<&str>;
    /// The member epoch.
    fn member_epoch(&self) -> i32;
    /// The heartbeat interval.
    fn heartbeat_interval_ms(&self) -> i32;
}

/// Implements [`EpochAnswer`] for a heartbeat response type of API `$api` with the usual field
/// names, held in a response body as the pattern `$body` binding `$b`; the closure reads the
/// member id from the answer `r`.
macro_rules! epoch_answer {
    // A kafka-protocol answer whose ApiKey and ResponseKind variants are both `$variant`.
    (kafka $variant:ident: $ty:ty) => {
        $crate::machine::epoch::epoch_answer!(
            $ty,
            $crate::request::Api::of(kafka_protocol::messages::ApiKey::$variant),
            r in $crate::request::ResponseBody::Kafka(
                kafka_protocol::messages::ResponseKind::$variant(r)
            ),
            |r| r.member_id.as_deref()
        );
    };
    ($ty:ty, $api:expr, $b:ident in $body:pat, |$r:ident| $member_id:expr) => {
        impl $crate::machine::epoch::EpochAnswer for $ty {
            const API: $crate::request::Api = $api;
            fn from_body(body: $crate::request::ResponseBody) -> Option<Self> {
                match body {
                    $body => Some($b),
                    _ => None,
                }
            }
            fn in_body(body: &$crate::request::ResponseBody) -> Option<&Self> {
                match body {
                    $body => Some($b),
                    _ => None,
                }
            }
            fn error_code(&self) -> i16 {
                self.error_code
            }
            fn error_message(&self) -> Option<&str> {
                self.error_message.as_deref()
            }
            fn member_id(&self) -> Option<&str> {
                let $r = self;
                $member_id
            }
            fn member_epoch(&self) -> i32 {
                self.member_epoch
            }
            fn heartbeat_interval_ms(&self) -> i32 {
                self.heartbeat_interval_ms
            }
        }
    };
}
pub(crate) use epoch_answer;

#[derive(Debug, Clone)]
pub(crate) enum Phase<R> {
    Unsubscribed,
    /// Sending epoch-0 heartbeats until the coordinator answers.
    Joining,
    /// Applying the target (waiting for a heartbeat in flight, metadata, or the guard).
    Reconciling,
    /// What is revoked is with the application; the rest of the reconciliation waits.
    AwaitRevoke {
        ticket: u64,
        /// Still reported as owned to the broker until the ticket comes back, so no heartbeat
        /// acknowledges the revocation before the application committed.
        revoking: R,
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

phases!(<R>
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

/// What the member records of a request in flight.
#[derive(Debug, Clone)]
pub(crate) enum Sent<P: EpochProtocol> {
    Heartbeat {
        epoch: i32,
        /// The member's incarnation (leaves completed) when it went out.
        incarnation: u64,
        own: P::Heartbeat,
    },
    Leave,
    /// A DescribeConfigs reading the group's session timeout.
    SessionRead(session::Step),
    /// A commit or offset fetch.
    Offsets(SentOffsets),
    /// A Metadata request for the topic names of an assignment by id.
    Metadata,
    /// A read of the coordinator's record of the member ([`EpochProtocol::read_back`]).
    ReadBack {
        /// The member's incarnation when it went out.
        incarnation: u64,
    },
    /// A request of the protocol's own ([`EpochProtocol::side_request`]).
    Side,
}

/// What the broker may know of a member: its registration state, which decides whether a leave
/// is due and whether UNRELEASED_INSTANCE_ID may be the member's own doing.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Registration {
    /// An epoch-0 heartbeat went out (the broker may know this member).
    pub(crate) join_sent: bool,
    /// This member may be registered under its instance id (lost join answer, or it held an
    /// epoch before): an UNRELEASED_INSTANCE_ID may be its own doing.
    may_be_registered: bool,
    /// UNRELEASED_INSTANCE_ID recoveries spent (at most [`UNRELEASED_RECOVERIES`]).
    unreleased_recoveries: u32,
    /// When the member first heard that another member id holds its instance id, in the wait
    /// that [`GroupConfig::unreleased_instance_margin`] bounds; reset by a successful join.
    held_since: Option<Instant>,
}

/// A member of an epoch-heartbeat group (sans-IO) speaking protocol `P`; see
/// [`ConsumerMember`](crate::machine::consumer::ConsumerMember) and
/// [`StreamsMember`](crate::machine::streams::StreamsMember) for each protocol's commands
/// and events, and the [module docs](self) for what all share.
#[derive(Debug)]
pub struct EpochMember<P: EpochProtocol> {
    pub(crate) shell: Shell<Sent<P>>,
    pub(crate) member_id: MemberId,
    pub(crate) epoch: i32,
    pub(crate) phase: Phase<P::Revoking>,
    /// The regular heartbeat in flight (at most one); only its answer frees the slot, also when
    /// it belongs to a membership the member left since.
    pub(crate) heartbeat_in_flight: Option<RequestId>,
    /// Leaves completed so far: answers to heartbeats of an earlier incarnation describe a
    /// membership the member left, and are ignored.
    pub(crate) incarnation: u64,
    heartbeat_failures: u32,
    /// The heartbeat interval the coordinator last gave.
    pub(crate) interval: Duration,
    /// A heartbeat that listed what the member owns failed in the transport: the broker may
    /// still process it (its bytes may have been read). Until a later heartbeat is answered,
    /// nothing is taken (see [`report_pending`](Self::report_pending)).
    owned_report_unsettled: bool,
    /// What the broker may know of this member.
    pub(crate) registration: Registration,
    answered_once: bool,
    /// A close or unsubscribe that waits for the outstanding revocation ticket.
    deferred_leave: Option<(CloseOptions, AfterLeave, Reason)>,
    /// The read of the group's session timeout, when configured.
    session_read: session::SessionRead,
    /// The read of the member's own record after a lost heartbeat answer.
    read_back: ReadBackState,
    /// An answer read back is being applied: it confirms no session (a read is no heartbeat).
    reading_back: bool,
    /// The protocol's own state.
    pub(crate) proto: P,
}

/// The member id a member built from `config` gets: `config.member_id`, else one derived from
/// `config.seed`; with neither the configuration is refused.
pub(crate) fn member_id_of(config: &GroupConfig) -> Result<MemberId, ConfigError> {
    match config.member_id {
        Some(id) => Ok(id),
        None => {
            config.validate()?;
            // No member id: the seed, or the error that names what is missing.
            Ok(MemberId::from_seed(config.jitter_seed()?))
        }
    }
}

/// The heartbeat `body` as the member sends it: raw, at `versions`.
pub(crate) fn raw_heartbeat(body: RequestKind, versions: RangeInclusive<i16>) -> Request {
    Request::Raw {
        body: Box::new(body),
        versions,
        fit: None,
    }
}

/// The members whose protocol starts from nothing but the group config (consumer and share).
impl<P: EpochProtocol + Default> EpochMember<P> {
    /// A member of `config.group_id`; not yet subscribed. Its KIP-1082 member id is
    /// `config.member_id`, else one derived from `config.seed` ([`MemberId::from_seed`]): the core
    /// reads no random source of its own. With neither, the configuration is refused (see
    /// [`GroupConfig::seed`]); the tokio driver fills the member id from the OS CSPRNG.
    pub fn new(config: GroupConfig, now: Instant) -> Result<Self, ConfigError> {
        let member_id = member_id_of(&config)?;
        Self::with_member_id(config, member_id, now)
    }

    /// A member with the given id, whatever `config.member_id` says (the member's
    /// [`config`](Self::config) then names `member_id`). Without `config.seed`, the backoff
    /// jitter is seeded from the id's bytes.
    pub fn with_member_id(
        config: GroupConfig,
        member_id: MemberId,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        Self::create(config, member_id, now, P::default())
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.next_event()
    }
}

impl<P: EpochProtocol> EpochMember<P> {
    /// Queues a commit of `offsets` with the member id and epoch (OffsetCommit v9+, which the
    /// coordinator checks against the member's epoch: OffsetMetadataManager.validateOffsetCommit
    /// for consumer and streams groups alike). Refused at once, typed, outside the group
    /// ([`CommitError::NotMember`]) and for partitions the member does not own
    /// ([`P::committable`](EpochProtocol::committable): [`CommitError::NotOwned`]).
    pub(crate) fn commit_offsets(&mut self, offsets: Vec<CommitOffset>, now: Instant) -> CommitId {
        self.queue_commit(offsets, now, |m| {
            if m.stopped() {
                m.phase().stop_error()
            } else if m.epoch <= 0 || !m.in_group() {
                Some(CommitError::NotMember {
                    reason: "the member holds no epoch".into(),
                })
            } else {
                None
            }
        })
    }

    /// A member with `member_id`, whatever `config.member_id` says (the member's config then
    /// names it). Without `config.seed`, the backoff jitter is seeded from the id's bytes.
    pub(crate) fn create(
        mut config: GroupConfig,
        member_id: MemberId,
        now: Instant,
        proto: P,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        proto.validate(&config)?;
        // A kept id may still be registered under the instance id (see
        // `GroupConfig::kept_member_id`): UNRELEASED_INSTANCE_ID may be this member's own.
        let kept = config.kept_member_id
            && config.instance_id.is_some()
            && config.member_id == Some(member_id);
        config.member_id = Some(member_id);
        let seed = config.jitter_seed()?;
        Ok(Self {
            member_id,
            epoch: 0,
            phase: Phase::Unsubscribed,
            heartbeat_in_flight: None,
            incarnation: 0,
            heartbeat_failures: 0,
            interval: Duration::ZERO,
            owned_report_unsettled: false,
            registration: Registration {
                may_be_registered: kept,
                ..Registration::default()
            },
            answered_once: false,
            deferred_leave: None,
            session_read: session::SessionRead::default(),
            read_back: ReadBackState::Idle,
            reading_back: false,
            proto,
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

    /// How the close ended, once the member is closed or stopped (`None` while it runs): the
    /// outcome the driver's `close()` returns ([`CloseOutcome`](crate::machine::events::CloseOutcome)).
    pub fn close_outcome(&self) -> Option<crate::machine::events::CloseOutcome> {
        self.shell.close_outcome(self.phase.stopped())
    }

    /// The terminal error, once stopped on one.
    pub fn fatal_error(&self) -> Option<&GroupError> {
        self.phase.error()
    }

    fn is_static(&self) -> bool {
        self.shell.config.instance_id.is_some()
    }

    pub(crate) fn in_group(&self) -> bool {
        matches!(
            self.phase,
            Phase::Joining
                | Phase::Reconciling
                | Phase::AwaitRevoke { .. }
                | Phase::Acknowledging
                | Phase::Stable
        )
    }

    /// What is being revoked, while a ticket is out.
    pub(crate) fn revoking(&self) -> Option<&P::Revoking> {
        match &self.phase {
            Phase::AwaitRevoke { revoking, .. } => Some(revoking),
            _ => None,
        }
    }

    // ------------------------------------------------------------------ commands

    /// Every input: the clock, the lease, and the protocol's follow-up.
    pub(crate) fn input(&mut self, now: Instant) {
        self.shell.advance(now);
        self.check_lease();
        P::settle(self);
    }

    /// Joins when out of the group; a member in the group sends its changed subscription with
    /// the next heartbeat, at once.
    pub(crate) fn start(&mut self, now: Instant) {
        self.shell.timers.set(
            Timer::PollInterval,
            after(now, self.shell.config.max_poll_interval),
        );
        match self.phase {
            Phase::Unsubscribed | Phase::Stale => self.join_group(Reason::Subscribed),
            _ if self.in_group() => self.shell.timers.stop(Timer::Heartbeat),
            _ => {}
        }
    }

    /// Leaves the subscription with a leave as `options` ask: what the application holds is
    /// released first. Does nothing once `close` was called.
    pub(crate) fn leave_subscription(&mut self, options: CloseOptions, now: Instant) {
        P::command(self, now);
        if self.closing() {
            return;
        }
        // The subscription goes in every state, so a later poll() does not rejoin.
        self.proto.unsubscribed();
        self.shell.timers.stop(Timer::PollInterval);
        if matches!(self.phase, Phase::Stale) {
            return self.set_phase(Phase::Unsubscribed, Reason::Unsubscribed);
        }
        if !self.in_group() {
            return;
        }
        self.leave_when_revoked(options, AfterLeave::Unsubscribe, Reason::Unsubscribed);
    }

    /// Releases what the application owns and leaves — but while a revocation ticket is out, the
    /// leave waits for it: a leave would let the broker hand what is being revoked to others
    /// before the application committed it (the ticket's promise).
    fn leave_when_revoked(&mut self, options: CloseOptions, then: AfterLeave, reason: Reason) {
        if let Some(revoking) = self.revoking().cloned() {
            P::release_except(self, &revoking);
            self.deferred_leave = Some((options, then, reason));
            // Bounded: without the ticket within max.poll.interval.ms the member leaves anyway.
            let at = after(self.shell.now, self.shell.config.max_poll_interval);
            self.shell.timers.set(Timer::PollInterval, at);
            return;
        }
        self.release_owned();
        self.leave(options, then, reason);
    }

    /// Records that the application is alive; after a poll timeout, rejoins.
    pub fn poll(&mut self, now: Instant) {
        P::command(self, now);
        self.check_lease();
        let subscribed = self.proto.subscribed();
        if self.polled(now, subscribed) && matches!(self.phase, Phase::Stale) {
            self.join_group(Reason::PolledAfterPollTimeout);
        }
    }

    /// Hands back the ticket of a revocation event; the reconciliation goes on (assign, then
    /// acknowledge). Errors with [`ApiMisuse::UnknownTicket`] for any other ticket.
    pub fn complete_revocation(
        &mut self,
        RevokeTicket { id }: RevokeTicket,
        now: Instant,
    ) -> Result<(), ApiMisuse> {
        P::command(self, now);
        match &self.phase {
            Phase::AwaitRevoke { ticket, revoking } if *ticket == id => {
                let revoking = revoking.clone();
                P::revoked(self, revoking);
                if let Some((options, then, reason)) = self.deferred_leave.take() {
                    self.release_owned();
                    self.leave(options, then, reason);
                    return Ok(());
                }
                self.set_phase(Phase::Reconciling, Reason::RevocationCompleted);
                P::reconcile(self);
                Ok(())
            }
            _ => Err(ApiMisuse::UnknownTicket),
        }
    }

    /// Closes the member: what the application holds released, the leave heartbeat sent as
    /// `options` ask (default: -2 static, -1 dynamic; leave-group: -1; remain-in-group: -2
    /// static, nothing dynamic), then the closed event. A close before the first answer still
    /// sends the leave with the member id.
    pub fn close(&mut self, options: CloseOptions, now: Instant) {
        P::command(self, now);
        if !self.begin_close(now) {
            return;
        }
        self.proto.unsubscribed();
        self.shell.timers.stop(Timer::PollInterval);
        if let Phase::Leaving { then, .. } = &mut self.phase {
            *then = AfterLeave::Close;
            return;
        }
        // A close takes an outstanding revocation ticket back (as the classic member's does):
        // what is being revoked is released with the rest.
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
        if let Some(out) = self.prefetch(needed) {
            return Some(out);
        }
        let Some(coordinator) = self.coordinator().cloned() else {
            // A leave that cannot be sent completes the leave (AbstractHeartbeatRequestManager
            // .onHeartbeatRequestSkipped) when no join went out: the broker cannot know the
            // member.
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
            let request = P::leave(self, epoch);
            let id = self.send(&coordinator, request, Sent::Leave);
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
                P::SESSION,
                Sent::SessionRead,
            )
        {
            return Some(out);
        }
        if self.in_group() && self.epoch > 0 && P::side_request(self, &coordinator).is_some() {
            return self.shell.outbound.pop_front();
        }
        if self.in_group() && self.heartbeat_in_flight.is_none() {
            let now = self.shell.now;
            let urgent = matches!(self.phase, Phase::Joining | Phase::Acknowledging);
            let due = self
                .shell
                .timers
                .get(Timer::Heartbeat)
                .is_none_or(|at| at <= now);
            let backoff_over = self
                .shell
                .timers
                .get(Timer::Rejoin)
                .is_none_or(|at| at <= now);
            if urgent && backoff_over || due {
                if self.read_back == ReadBackState::Due && self.epoch > 0 {
                    if let Some(request) = P::read_back(self) {
                        let incarnation = self.incarnation;
                        let id = self.send(&coordinator, request, Sent::ReadBack { incarnation });
                        // It takes the heartbeat's slot: the next heartbeat follows its answer.
                        self.heartbeat_in_flight = Some(id);
                        self.read_back = ReadBackState::InFlight;
                        return self.shell.outbound.pop_front();
                    }
                    self.read_back = ReadBackState::Idle;
                }
                return Some(self.build_heartbeat(&coordinator));
            }
        }
        None
    }

    /// The earliest deadline and its timer.
    pub fn poll_timeout(&self) -> Option<(Instant, Timer)> {
        if let Some(timer) = P::urgent_timer(self) {
            return Some((self.shell.now, timer));
        }
        self.shell.poll_timeout(|t| match t {
            Timer::Heartbeat | Timer::Rejoin => {
                self.in_group() && self.heartbeat_in_flight.is_none()
            }
            _ => self.ids_act_on(t) && P::acts_on(self, t),
        })
    }

    // ------------------------------------------------------------------ inputs

    /// Advances the clock and fires due timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.shell.tick(now);
        self.check_lease();
        self.metadata_refresh_due();
        P::on_timers(self);
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
            return P::unrouted(self);
        };
        // A lease that ran out while the answer was on its way is lost first: the answer was
        // sent before it ran out and cannot vouch for the membership now.
        self.check_lease();
        match sent {
            Sent::Heartbeat {
                epoch,
                incarnation,
                own,
            } => {
                if P::reported_owned(&own) && result.is_err() {
                    self.owned_report_unsettled = true;
                }
                self.on_heartbeat(id, epoch, incarnation, own, result);
                // What was held back while this heartbeat was in flight is taken now, whatever
                // its answer was.
                if matches!(self.phase, Phase::Reconciling)
                    && self.proto.has_target()
                    && self.heartbeat_in_flight.is_none()
                {
                    P::reconcile(self);
                }
            }
            Sent::Leave => self.on_leave(id, result),
            Sent::SessionRead(step) => session::apply(
                &mut self.shell,
                &mut self.session_read,
                step,
                &result,
                P::SESSION,
                self.interval,
            ),
            Sent::Offsets(sent) => self.on_offsets(sent, result),
            Sent::Metadata => self.on_metadata(result),
            Sent::ReadBack { incarnation } => self.on_read_back(id, incarnation, result),
            Sent::Side => P::side_answer(self, id, result),
        }
        P::settle(self);
    }

    // ------------------------------------------------------------------ transitions

    pub(crate) fn join_group(&mut self, reason: Reason) {
        self.shell.end_lease();
        self.epoch = 0;
        self.read_back = ReadBackState::Idle;
        self.proto.reset();
        self.shell.timers.stop(Timer::Heartbeat);
        self.set_phase(Phase::Joining, reason);
    }

    /// Fenced (FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID, or the lease ran out): what the
    /// application holds is lost, rejoin at epoch 0 with the same member id
    /// (AbstractMembershipManager.transitionToFenced).
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
        self.join_group(reason);
    }

    /// Decides the leave epoch and starts leaving; without a leave due, finishes at once.
    fn leave(&mut self, options: CloseOptions, then: AfterLeave, reason: Reason) {
        // ConsumerMembershipManager.leaveGroupEpoch (StreamsMembershipManager's is the same),
        // and dynamic + remain-in-group sends nothing.
        self.read_back = ReadBackState::Idle;
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
        self.proto.reset();
        self.registration.join_sent = false;
        // A regular heartbeat still outstanding keeps its slot until its answer (ignored then):
        // the next join must not overlap it.
        self.incarnation += 1;
        match then {
            AfterLeave::Close => {
                P::closed(self);
                self.shell.fail_offsets(CommitError::Closed);
                self.set_phase(Phase::Closed, Reason::Left);
                self.shell.events.push_back(Event::Closed);
            }
            AfterLeave::Unsubscribe if self.proto.subscribed() => {
                self.join_group(Reason::Resubscribed)
            }
            AfterLeave::Unsubscribe => self.set_phase(Phase::Unsubscribed, Reason::Left),
            AfterLeave::Stale => self.set_phase(Phase::Stale, Reason::LeftOnPollTimeout),
            AfterLeave::Rejoin => self.join_group(Reason::RejoinAfterInstanceRelease),
        }
    }

    /// The lease ran out: the coordinator may have expired the member after the group's session
    /// timeout and given what it held to others, so that is lost now, as when fenced. The
    /// member keeps its member id, looks the coordinator up again and rejoins at epoch 0;
    /// answers to heartbeats sent before are ignored (they cannot vouch for the membership now).
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

    // ------------------------------------------------------------------ reconciliation

    /// Hands `revoking` to the application with a new ticket (`emit` tells it) and waits for the
    /// ticket to come back.
    pub(crate) fn start_revocation(
        &mut self,
        revoking: P::Revoking,
        emit: impl FnOnce(&mut Self, RevokeTicket),
    ) {
        let ticket = self.shell.next_ticket();
        emit(self, RevokeTicket { id: ticket });
        self.set_phase(Phase::AwaitRevoke { ticket, revoking }, Reason::Revoking);
    }

    /// Whether taking more now could be misread by the broker: a heartbeat on its way lists
    /// what this member owned when it went out, and the broker could read that list as "the
    /// revocations are done" (CurrentAssignmentBuilder.ownsRevokedPartitions / hasNotReleased)
    /// and hand what this member is still taking under an older epoch to another member. If it
    /// failed in the transport the broker may still process it, so until a later one is
    /// answered (the coordinator reads a group's requests in order).
    pub(crate) fn report_pending(&self) -> bool {
        let in_flight = self
            .heartbeat_in_flight
            .and_then(|id| self.shell.in_flight(id))
            .is_some_and(|s| matches!(s, Sent::Heartbeat { own, .. } if P::reported_owned(own)));
        in_flight || self.owned_report_unsettled
    }

    /// The end of a reconciliation: acknowledge what the broker has not heard yet, else stable,
    /// else still reconciling for `waiting`.
    pub(crate) fn reconciled(&mut self, acked: bool, waiting: Option<Reason>) {
        match waiting {
            _ if !acked => self.set_phase(Phase::Acknowledging, Reason::AcknowledgingAssignment),
            None => self.set_phase(Phase::Stable, Reason::AssignmentReconciled),
            Some(reason) => self.set_phase(Phase::Reconciling, reason),
        }
    }

    // ------------------------------------------------------------------ requests

    pub(crate) fn send(
        &mut self,
        coordinator: &Broker,
        request: Request,
        sent: Sent<P>,
    ) -> RequestId {
        self.shell
            .send(Target::Coordinator(coordinator.clone()), request, sent)
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
        let (versions, fit) = versions;
        let request = Request::Raw {
            body: Box::new(body),
            versions,
            fit,
        };
        self.send(coordinator, request, Sent::Offsets(sent));
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

    fn on_offsets(&mut self, sent: SentOffsets, result: Result<Response, TransportError>) {
        let (fence, now) = (self.fence(), self.shell.now);
        let (event, hint) = self.shell.offsets.answer(sent, result, &fence, now);
        // Only Rediscover comes back for the epoch protocols (the fencing answers of a commit
        // are read as NotMember/Retriable; the heartbeat does the fencing).
        if hint == Some(Hint::Rediscover) {
            self.shell.coordinator_failed();
        }
        self.shell.events.extend(event);
    }

    fn build_heartbeat(&mut self, coordinator: &Broker) -> Outbound {
        let epoch = self.epoch;
        let (request, own) = P::heartbeat(self);
        if epoch == 0 {
            self.registration.join_sent = true;
        }
        let sent = Sent::Heartbeat {
            epoch,
            incarnation: self.incarnation,
            own,
        };
        let id = self.send(coordinator, request, sent);
        self.heartbeat_in_flight = Some(id);
        self.shell.outbound.pop_front().expect("just pushed")
    }

    // ------------------------------------------------------------------ answers

    fn backoff_heartbeat(&mut self) {
        let delay = self.shell.backoff(&mut self.heartbeat_failures);
        let at = after(self.shell.now, delay);
        self.shell.timers.set(Timer::Heartbeat, at);
        self.shell.timers.set(Timer::Rejoin, at);
    }

    fn on_heartbeat(
        &mut self,
        id: RequestId,
        sent_epoch: i32,
        incarnation: u64,
        own: P::Heartbeat,
        result: Result<Response, TransportError>,
    ) {
        if self.heartbeat_in_flight == Some(id) {
            self.heartbeat_in_flight = None;
        }
        if incarnation != self.incarnation || !self.in_group() {
            // Sent before the member last left: it answers for a membership that is gone (the
            // broker may even have registered it after the leave's answer was written); or the
            // member left (or stopped) since: nothing changes.
            return;
        }
        let a = match result.map(P::decode) {
            Ok(Some(a)) => a,
            Ok(None) => {
                let api = P::Answer::API;
                return self.fail(invalid::<P>(&format!("the answer is not a {api} response")));
            }
            Err(TransportError::UnsupportedApi { .. }) => return self.fail(P::unsupported()),
            Err(e) => {
                tracing::debug!(error = %e, "heartbeat failed in the transport");
                if sent_epoch == 0 {
                    // The join may have landed: the broker may know this member.
                    self.registration.may_be_registered = true;
                } else {
                    self.read_back = ReadBackState::Due;
                }
                self.proto.forget_sent(false);
                self.shell.coordinator_failed();
                return self.backoff_heartbeat();
            }
        };
        let code = a.error_code();
        if code != codes::NONE {
            // Every failed attempt makes the next heartbeat full (resetHeartbeatState).
            self.proto.forget_sent(true);
        }
        if matches!(
            code,
            codes::COORDINATOR_NOT_AVAILABLE | codes::NOT_COORDINATOR
        ) {
            // The heartbeat may have landed although it was answered with an error: a write
            // that timed out is answered COORDINATOR_NOT_AVAILABLE while its records still
            // commit (CoordinatorRuntime's OperationTimeout), and a coordinator that unloads
            // answers its pending writes NOT_COORDINATOR while the next leader may hold their
            // records. A join may have registered the member; a heartbeat's answer is lost.
            if sent_epoch == 0 {
                self.registration.may_be_registered = true;
            } else {
                self.read_back = ReadBackState::Due;
            }
        }
        if let Some(e) = P::own_error(self, &a) {
            return self.fail(e);
        }
        let group = self.shell.config.group_id.clone();
        match classify(P::Answer::API, code, &group) {
            ErrorAction::Proceed => self.heartbeat_ok(sent_epoch, own, a),
            ErrorAction::FencedMember => {
                tracing::info!(%group, code, "fenced; rejoining with the same member id");
                self.fenced(if code == codes::FENCED_MEMBER_EPOCH {
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
                self.fail(GroupError::FencedInstanceId { group, instance_id });
            }
            ErrorAction::UnsupportedProtocol => self.fail(P::unsupported()),
            ErrorAction::Rediscover => {
                self.shell.coordinator_failed();
                // Retry as soon as the coordinator is found again.
                self.heartbeat_failures = 0;
                self.shell.timers.stop(Timer::Heartbeat);
                self.shell.timers.stop(Timer::Rejoin);
            }
            ErrorAction::Report => {
                tracing::warn!(%group, code, message = ?a.error_message(), "heartbeat error reported, member carries on");
                self.backoff_heartbeat();
            }
            ErrorAction::Fatal(GroupError::Fatal { api, code })
                if code == codes::INVALID_REQUEST =>
            {
                let message = a.error_message().map(str::to_owned);
                self.fail(GroupError::InvalidRequest {
                    group,
                    api,
                    message,
                })
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
                api: P::Answer::API,
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
        } else if own_join {
            self.wait_for_release(instance_id);
        } else {
            self.fail(GroupError::UnreleasedInstanceId {
                group: self.shell.config.group_id.clone(),
                instance_id,
            });
        }
    }

    /// Another member id holds the instance id: a crashed earlier incarnation until its session
    /// expires, or a live duplicate for good. Retries the join with backoff while the wait is
    /// below the group's session timeout plus [`GroupConfig::unreleased_instance_margin`];
    /// once it is spent (or waiting is off), stops with the typed error.
    fn wait_for_release(&mut self, instance_id: String) {
        let stop = |m: &mut Self, instance_id| {
            m.fail(GroupError::UnreleasedInstanceId {
                group: m.shell.config.group_id.clone(),
                instance_id,
            })
        };
        let Some(margin) = self.shell.config.unreleased_instance_margin else {
            return stop(self, instance_id);
        };
        let limit = self
            .shell
            .config
            .group_session_timeout
            .saturating_add(margin);
        let now = self.shell.now;
        let since = *self.registration.held_since.get_or_insert(now);
        let waited = now.saturating_duration_since(since);
        if waited > limit {
            return stop(self, instance_id);
        }
        if waited.is_zero() {
            tracing::warn!(group = %self.shell.config.group_id, %instance_id, ?limit, "UNRELEASED_INSTANCE_ID: another member id holds the instance id; rejoining with backoff until its session expires");
            self.shell
                .events
                .push_back(Event::InstanceHeld { instance_id, limit });
        }
        self.backoff_heartbeat();
    }

    fn heartbeat_ok(&mut self, sent_epoch: i32, own: P::Heartbeat, a: P::Answer) {
        self.owned_report_unsettled = false;
        // Every error-free answer restarts the interval (HeartbeatRequestState.resetTimer)...
        self.interval = Duration::from_millis(a.heartbeat_interval_ms().max(0) as u64);
        let at = after(self.shell.now, self.interval);
        self.shell.timers.set(Timer::Heartbeat, at);
        // ...but one with a negative epoch is otherwise ignored (it only completes leaves).
        // Whatever the heartbeat carried is then not recorded as the coordinator's view: the
        // next heartbeat is full, so a changed subscription it carried is sent again.
        if a.member_epoch() < 0 {
            self.proto.forget_sent(false);
            return;
        }
        if let Some(id) = a.member_id()
            && id != self.member_id.as_str()
        {
            return self.fail(invalid::<P>(&format!(
                "the coordinator answered for member {id:?}, not {}",
                self.member_id
            )));
        }
        P::answered(self, sent_epoch, own, a);
        if matches!(
            self.phase,
            Phase::Joining | Phase::Acknowledging | Phase::Stable | Phase::Reconciling
        ) {
            P::reconcile(self);
        }
    }

    /// The protocol accepted an answer at `member_epoch` (see [`EpochProtocol::answered`]).
    pub(crate) fn accept(&mut self, member_epoch: i32) {
        self.answered_once = true;
        self.heartbeat_failures = 0;
        self.shell.timers.stop(Timer::Rejoin);
        if member_epoch > 0 && !self.reading_back {
            // The coordinator restarted the member's session when it read this heartbeat.
            let bound = epoch_lease_bound(&self.shell.config, self.interval);
            self.shell.confirm_membership(bound);
            self.registration.may_be_registered = true;
            // A successful join ends an UNRELEASED_INSTANCE_ID episode: the bound is per episode.
            self.registration.unreleased_recoveries = 0;
            self.registration.held_since = None;
        }
        self.epoch = member_epoch;
    }

    /// The answer to a read of the member's own record: applied as the lost heartbeat answer
    /// would have been (the target, the epoch; no session confirmed: a read is no heartbeat),
    /// then the next heartbeat goes at once, full.
    fn on_read_back(&mut self, id: RequestId, incarnation: u64, result: Reply) {
        if self.heartbeat_in_flight == Some(id) {
            self.heartbeat_in_flight = None;
        }
        if incarnation != self.incarnation
            || !self.in_group()
            || self.read_back != ReadBackState::InFlight
        {
            return;
        }
        self.read_back = ReadBackState::Idle;
        let outcome = match result {
            Ok(response) => P::read_back_answer(self, response),
            // A coordinator without the read: heartbeat on, as before it existed.
            Err(TransportError::UnsupportedApi { .. }) => ReadBack::Done,
            Err(e) => {
                tracing::debug!(error = %e, "reading the member's record back failed");
                ReadBack::Retry
            }
        };
        match outcome {
            ReadBack::Record(answer, listed) => {
                tracing::info!(group = %self.shell.config.group_id, epoch = answer.member_epoch(), "a heartbeat answer was lost; applying the coordinator's record of the member");
                let unsettled = self.owned_report_unsettled;
                self.reading_back = true;
                self.heartbeat_ok(self.epoch, listed, answer);
                self.reading_back = false;
                self.owned_report_unsettled = unsettled;
                self.proto.forget_sent(false);
                let now = self.shell.now;
                self.shell.timers.set(Timer::Heartbeat, now);
            }
            ReadBack::Retry => {
                self.read_back = ReadBackState::Due;
                self.shell.coordinator_failed();
                self.backoff_heartbeat();
            }
            ReadBack::Done => {
                let now = self.shell.now;
                self.shell.timers.set(Timer::Heartbeat, now);
            }
        }
    }

    fn on_leave(&mut self, id: RequestId, result: Result<Response, TransportError>) {
        let then = match self.phase {
            Phase::Leaving {
                request: Some(r),
                then,
                ..
            } if r == id => then,
            _ => return,
        };
        let code = match &result {
            Ok(response) => P::error_code(response).unwrap_or(0),
            _ => 0,
        };
        if code != codes::NONE {
            tracing::info!(code, "leave heartbeat answered with an error");
        }
        self.shell.leave_answered(&result, code);
        // The -2 leave of an UNRELEASED_INSTANCE_ID recovery answered FENCED_INSTANCE_ID: the
        // instance id is held by another member id (consumerGroupStaticMemberGroupLeave ->
        // throwIfInstanceIdIsFenced), i.e. another process's or an earlier incarnation's, not
        // this member's own join. Rejoining cannot succeed before that member leaves or its
        // session expires: wait for that as for any instance id held elsewhere (or stop, as
        // the Java client does, when waiting is off), rather than spend the recovery budget.
        if then == AfterLeave::Rejoin
            && code == codes::FENCED_INSTANCE_ID
            && let Some(instance_id) = self.shell.config.instance_id.clone()
        {
            self.finish_leave(then);
            // Nothing of this member holds the instance id: the next UNRELEASED_INSTANCE_ID is
            // not its own either (until a join of its own may land again), and this recovery
            // does not count against the bound, which is for its own registrations
            // (tests/sim_random.rs seed 45887: two such recoveries, then the member's own
            // timed-out join held the instance id and the spent bound made that fatal).
            self.registration.may_be_registered = false;
            self.registration.unreleased_recoveries =
                self.registration.unreleased_recoveries.saturating_sub(1);
            return self.wait_for_release(instance_id);
        }
        let failed = result.is_err()
            || matches!(
                code,
                codes::COORDINATOR_NOT_AVAILABLE
                    | codes::NOT_COORDINATOR
                    | codes::COORDINATOR_LOAD_IN_PROGRESS
            );
        if then == AfterLeave::Rejoin && (failed || code == codes::NONE) {
            // An accepted -2 leave under this member's id proves the instance id was held by
            // this very member id (consumerGroupStaticMemberGroupLeave answers
            // UNKNOWN_MEMBER_ID when nobody holds it, throwIfInstanceIdIsFenced
            // FENCED_INSTANCE_ID when another id does): the UNRELEASED_INSTANCE_ID was this
            // member's own lost join (tests/sim_random.rs seed 788016: three joins in a row whose
            // answers outlived the request timeout). A failed one may not have released anything
            // (the coordinator was unavailable, its append failed or is still pending). Neither
            // counts against the bound.
            self.registration.unreleased_recoveries =
                self.registration.unreleased_recoveries.saturating_sub(1);
            if result.is_err()
                || matches!(
                    code,
                    codes::COORDINATOR_NOT_AVAILABLE | codes::NOT_COORDINATOR
                )
            {
                self.shell.coordinator_failed();
            }
        }
        // Fire once: the leave completes whatever the answer.
        self.finish_leave(then);
    }
}

/// The terminal error of an answer that breaks the protocol.
pub(crate) fn invalid<P: EpochProtocol>(reason: &str) -> GroupError {
    GroupError::InvalidResponse {
        api: P::Answer::API,
        reason: reason.to_owned(),
    }
}

impl<P: EpochProtocol> Skeleton for EpochMember<P> {
    type Phase = Phase<P::Revoking>;
    type Sent = Sent<P>;

    fn parts(
        &mut self,
    ) -> (
        &mut Shell<Sent<P>>,
        &mut Self::Phase,
        &dyn fmt::Display,
        i32,
    ) {
        (
            &mut self.shell,
            &mut self.phase,
            &self.member_id,
            self.epoch,
        )
    }

    fn phase(&self) -> &Self::Phase {
        &self.phase
    }

    fn shell_ref(&self) -> &Shell<Sent<P>> {
        &self.shell
    }

    fn take_owned(&mut self) -> Vec<TopicPartition> {
        P::take_owned(self)
    }

    fn owned_partitions(&self) -> BTreeSet<TopicPartition> {
        P::committable(self)
    }

    fn lease_expired(&mut self) {
        self.on_lease_expired()
    }

    fn release_owned(&mut self) {
        P::release(self)
    }

    fn lose_owned(&mut self, reason: Reason) {
        P::lose(self, reason)
    }
}
