//! What every group member has besides its protocol: configuration, clock, coordinator lookup,
//! request ids and what each request in flight was sent with, timers, backoff and its seeded
//! jitter, the application's events, the requests waiting to go out, and the offsets queue.
//!
//! A member embeds one [`Shell`] and keeps only its protocol: its phases, what it sends and how
//! it reads the answers.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, GroupId, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use super::TopicPartition;
use super::coordinator::{CoordinatorLookup, LookupConfig, LookupEvent};
use super::events::{
    CloseOutcome, CommitError, CommitId, CommitOffset, Event, FetchId, MemberState, Reason,
};
use super::offsets::OffsetQueue;
use super::timer::{Timer, TimerTable};
use crate::backoff::{ExponentialBackoff, JitterRng};
use crate::config::GroupConfig;
use crate::error::ApiMisuse;
use crate::error::{GroupError, TransportError};
use crate::request::{
    Api, Broker, Fit, Outbound, Reply, Request, RequestId, RequestIds, ResponseBody, Target,
};

/// Where a member's coordinator lookup numbers its requests: far above the member's own ids.
pub(crate) const LOOKUP_IDS: u64 = 1 << 48;

/// A member's phase, as the application sees it: a [`MemberState`].
pub(crate) trait PhaseName {
    /// The phase's public state.
    fn state(&self) -> MemberState;
    /// Closed or stopped by a terminal error: the member only answers calls from now on.
    fn stopped(&self) -> bool;
    /// The phase of a member stopped by `error`.
    fn fatal(error: GroupError) -> Self;
    /// Why a commit or fetch is refused once the member stopped: `None` while it runs.
    fn stop_error(&self) -> Option<crate::machine::events::CommitError>;
    /// The terminal error, once stopped on one.
    fn error(&self) -> Option<&GroupError>;
}

/// Implements [`PhaseName`] for a member's `Phase` (generic over the parameters in `<..>`, if
/// any) from its variants (each with the pattern of its fields), each the [`MemberState`]
/// variant of the same name; `Closed` and `Fatal(GroupError)` are the stopped ones.
macro_rules! phases {
    (<$($g:ident),*> $($variant:ident $({ $($named:tt)* })? $(( $($unnamed:tt)* ))?),* $(,)?) => {
        impl<$($g),*> $crate::machine::shell::PhaseName for Phase<$($g),*> {
            fn state(&self) -> $crate::machine::events::MemberState {
                match self {
                    $(Phase::$variant $({ $($named)* })? $(( $($unnamed)* ))? => {
                        $crate::machine::events::MemberState::$variant
                    })*
                }
            }

            fn stopped(&self) -> bool {
                matches!(self, Phase::Closed | Phase::Fatal(_))
            }

            fn fatal(error: $crate::error::GroupError) -> Self {
                Phase::Fatal(error)
            }

            fn error(&self) -> Option<&$crate::error::GroupError> {
                match self {
                    Phase::Fatal(error) => Some(error),
                    _ => None,
                }
            }

            fn stop_error(&self) -> Option<$crate::machine::events::CommitError> {
                use $crate::machine::events::CommitError;
                match self {
                    Phase::Closed => Some(CommitError::Closed),
                    Phase::Fatal(error) => Some(CommitError::Fatal(error.clone())),
                    _ => None,
                }
            }
        }
    };
    ($($rest:tt)*) => {
        $crate::machine::shell::phases!(<> $($rest)*);
    };
}
pub(crate) use phases;

/// Implements [`Skeleton`] for a member with fields `shell`, `phase`, `member_id` and the named
/// generation (or epoch) field, whose partitions `take_owned` gives up, and whose inherent
/// `on_lease_expired` reacts to the lease running out.
macro_rules! skeleton {
    ($ty:ty, $generation:ident, |$m:ident| $take_owned:expr) => {
        impl $crate::machine::shell::Skeleton for $ty {
            type Phase = Phase;
            type Sent = Sent;

            fn parts(
                &mut self,
            ) -> (
                &mut $crate::machine::shell::Shell<Sent>,
                &mut Phase,
                &dyn std::fmt::Display,
                i32,
            ) {
                (
                    &mut self.shell,
                    &mut self.phase,
                    &self.member_id,
                    self.$generation,
                )
            }

            fn phase(&self) -> &Phase {
                &self.phase
            }

            fn shell_ref(&self) -> &$crate::machine::shell::Shell<Sent> {
                &self.shell
            }

            fn take_owned(&mut self) -> Vec<$crate::machine::TopicPartition> {
                let $m = self;
                $take_owned
            }

            fn owned_partitions(
                &self,
            ) -> std::collections::BTreeSet<$crate::machine::TopicPartition> {
                self.committable()
            }

            fn lease_expired(&mut self) {
                <$ty>::on_lease_expired(self)
            }
        }
    };
}
pub(crate) use skeleton;

/// A member as the shared transitions see it: its shell, its phase, who it is, and what it owns.
pub(crate) trait Skeleton {
    /// The member's phases.
    type Phase: PhaseName;
    /// What the member records of a request in flight.
    type Sent;
    /// The shell, the phase, the member id and the generation (or epoch), at once.
    fn parts(
        &mut self,
    ) -> (
        &mut Shell<Self::Sent>,
        &mut Self::Phase,
        &dyn fmt::Display,
        i32,
    );
    /// The shell.
    fn shell(&mut self) -> &mut Shell<Self::Sent> {
        self.parts().0
    }
    /// The phase.
    fn phase(&self) -> &Self::Phase;
    /// The shell, to read.
    fn shell_ref(&self) -> &Shell<Self::Sent>;
    /// Gives up every owned partition; returns them.
    fn take_owned(&mut self) -> Vec<TopicPartition>;
    /// The partitions the member owns now (what it may commit).
    fn owned_partitions(&self) -> BTreeSet<TopicPartition>;

    /// Closed or stopped by a terminal error.
    fn stopped(&self) -> bool {
        self.phase().stopped()
    }

    /// Stopped, or `close()` was called: the member only moves towards `Closed`.
    fn closing(&self) -> bool {
        self.stopped() || self.shell_ref().close_requested
    }

    /// `close()` at `now`: `false` when already stopped (nothing to do); otherwise the member
    /// only moves towards `Closed` from now on.
    fn begin_close(&mut self, now: Instant) -> bool {
        self.shell().advance(now);
        if self.stopped() {
            return false;
        }
        self.shell().close_requested = true;
        true
    }

    /// The topics of a `subscribe` at `now`, or why it is refused: the member is closing or
    /// stopped, or no topic is named.
    fn subscription(
        &mut self,
        topics: impl IntoIterator<Item = String>,
        now: Instant,
    ) -> Result<BTreeSet<String>, ApiMisuse> {
        self.shell().advance(now);
        if self.closing() {
            return Err(ApiMisuse::Stopped);
        }
        let topics: BTreeSet<String> = topics.into_iter().collect();
        if topics.is_empty() {
            return Err(ApiMisuse::EmptySubscription);
        }
        Ok(topics)
    }

    /// The application's poll loop ran at `now`: while `subscribed` and not closing, the
    /// `max.poll.interval.ms` deadline moves on and `true` says the member is polled.
    fn polled(&mut self, now: Instant, subscribed: bool) -> bool {
        self.shell().advance(now);
        if !subscribed || self.closing() {
            return false;
        }
        let shell = self.shell();
        let deadline = crate::machine::timer::after(now, shell.config.max_poll_interval);
        shell.timers.set(Timer::PollInterval, deadline);
        true
    }

    /// The one funnel for state changes (see [`Shell::set_phase`]).
    fn set_phase(&mut self, next: Self::Phase, reason: Reason) {
        let (shell, phase, member_id, generation) = self.parts();
        shell.set_phase(phase, next, reason, member_id, generation);
    }

    /// Stops on `error`: partitions lost, queued commits and fetches failed, the fatal phase,
    /// [`Event::Fatal`]. Once stopped, nothing more happens.
    fn fail(&mut self, error: GroupError) {
        if self.stopped() {
            return;
        }
        self.lose_owned(Reason::FatalError);
        tracing::error!(group = %self.shell().config.group_id, %error, "member stopped");
        self.shell().fail_offsets(CommitError::Fatal(error.clone()));
        self.set_phase(Self::Phase::fatal(error.clone()), Reason::FatalError);
        self.shell().events.push_back(Event::Fatal(error));
    }

    /// The member's reaction to its lease running out: lose what it owns (reason
    /// [`Reason::LeaseExpired`]), keep its member id, and rejoin once the coordinator answers.
    fn lease_expired(&mut self);

    /// Runs [`lease_expired`](Self::lease_expired) when the lease ran out by the current time.
    /// Every input checks this before anything else, so a member driven again after a stall
    /// reports its partitions lost before it acts on anything.
    fn check_lease(&mut self) {
        if self.shell().lease_ran_out() {
            self.lease_expired();
        }
    }

    /// Queues a fetch of the committed offsets of `partitions` (refused once stopped).
    fn queue_fetch(&mut self, partitions: Vec<TopicPartition>, now: Instant) -> FetchId {
        self.shell().advance(now);
        let refusal = self.phase().stop_error();
        let shell = self.shell();
        let id = FetchId(shell.next_op());
        let now = shell.now;
        shell
            .offsets
            .fetch(id, partitions, (refusal, now), &mut shell.events);
        id
    }

    /// Queues a commit of `offsets`, or refuses it at once with what `refusal` says now.
    fn queue_commit(
        &mut self,
        offsets: Vec<CommitOffset>,
        now: Instant,
        refusal: impl FnOnce(&Self) -> Option<CommitError>,
    ) -> CommitId {
        self.shell().advance(now);
        self.check_lease();
        let refusal = match self.phase().stop_error() {
            Some(e) => Some(e),
            // The partitions were reported lost: no commit until the membership is confirmed.
            None if self.shell_ref().lease.expired => Some(CommitError::LeaseExpired),
            None => refusal(self),
        }
        .or_else(|| {
            let owned = self.owned_partitions();
            let partitions: Vec<TopicPartition> = (offsets.iter())
                .map(|o| &o.partition)
                .filter(|tp| !owned.contains(tp))
                .cloned()
                .collect();
            (!partitions.is_empty()).then_some(CommitError::NotOwned { partitions })
        });
        let shell = self.shell();
        let id = CommitId(shell.next_op());
        let now = shell.now;
        shell
            .offsets
            .commit(id, offsets, (refusal, now), &mut shell.events);
        id
    }

    /// The next event for the application; a terminal failure of the coordinator lookup stops
    /// the member first.
    fn next_event(&mut self) -> Option<Event> {
        while let Some(error) = self.shell().lookup_failure() {
            self.fail(error);
        }
        self.shell().events.pop_front()
    }

    /// The application gave its partitions up itself (close, unsubscribe): [`Event::Revoked`].
    fn release_owned(&mut self) {
        let partitions = self.take_owned();
        self.shell().report_revoked(partitions);
    }

    /// The member lost its partitions without a revocation (fenced, stopped, poll timeout):
    /// [`Event::Lost`].
    fn lose_owned(&mut self, reason: Reason) {
        let partitions = self.take_owned();
        self.shell().report_lost(partitions, reason);
    }
}

/// A request in flight: what it was sent with (`S`, the member's own record) and the
/// coordinator (node id) it went to, if it went to one.
#[derive(Debug, Clone)]
struct InFlight<S> {
    sent: S,
    node: Option<i32>,
    /// The API, and the broker it went to as [`GroupError::TimedOut`] names it.
    api: Api,
    broker: String,
    /// The member's clock when the request was queued: no later than its transmission, so no
    /// later than when the coordinator read it.
    at: Instant,
}

/// The membership lease (see [`crate::machine`], "The membership lease"): when the request whose
/// answer last confirmed the membership went out. The coordinator restarted the member's session
/// no earlier than it read that request, so the session cannot have expired before
/// `confirmed + session timeout`.
/// The broker's default `group.consumer.heartbeat.interval.ms` (and
/// `group.streams.heartbeat.interval.ms`).
const DEFAULT_BROKER_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);

/// The lease bound of a consumer-protocol or streams member: the group's session timeout
/// ([`GroupConfig::group_session_timeout`]) less the heartbeat interval the coordinator last
/// gave (`interval`; the broker default, 5 s, before any).
pub(crate) fn epoch_lease_bound(config: &GroupConfig, interval: Duration) -> Duration {
    let interval = if interval.is_zero() {
        DEFAULT_BROKER_HEARTBEAT_INTERVAL
    } else {
        interval
    };
    lease_bound(config.group_session_timeout, interval)
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Lease {
    /// Send time of the last request whose answer confirmed the membership (`None`: no
    /// membership to lose).
    confirmed: Option<Instant>,
    /// The lease ran out and no answer has confirmed a membership since: commits are refused.
    pub(crate) expired: bool,
}

/// How long a confirmation holds: the session timeout less one heartbeat interval (the margin
/// for the heartbeat that would have renewed it), or half the session when the interval is not
/// below it.
pub(crate) fn lease_bound(session: Duration, heartbeat_interval: Duration) -> Duration {
    match session.checked_sub(heartbeat_interval) {
        Some(d) if !d.is_zero() => d,
        _ => session / 2,
    }
}

/// The member's wait to get into the group ([`Event::NotJoined`]): since when, and what the
/// latest join request to the coordinator came to.
#[derive(Debug, Default)]
struct JoinWait {
    since: Option<Instant>,
    /// The latest join request: its API and its broker.
    sent: Option<(Api, String)>,
    /// The latest failure of a join request: its API, its broker, the failure as text and the
    /// transport's error, if it was one.
    failed: Option<(Api, String, String, Option<TransportError>)>,
}

/// Whether a member in `state` is waiting to get into the group: it wants in and no answer has
/// made it a member (with an assignment) yet.
fn waits_to_join(state: MemberState) -> bool {
    matches!(
        state,
        MemberState::Rejoin | MemberState::Joining | MemberState::Assigning | MemberState::Syncing
    )
}

/// The requests a member sends to get into the group.
fn joins(api: Api) -> bool {
    [
        ApiKey::JoinGroup,
        ApiKey::SyncGroup,
        ApiKey::ConsumerGroupHeartbeat,
    ]
    .iter()
    .any(|k| api == Api::from(*k))
        || api == Api::STREAMS_GROUP_HEARTBEAT
}

/// The top-level error code of an answer to a join request (0: none).
fn join_error_code(body: &ResponseBody) -> i16 {
    match body {
        ResponseBody::Kafka(ResponseKind::JoinGroup(r)) => r.error_code,
        ResponseBody::Kafka(ResponseKind::SyncGroup(r)) => r.error_code,
        ResponseBody::Kafka(ResponseKind::ConsumerGroupHeartbeat(r)) => r.error_code,
        ResponseBody::StreamsGroupHeartbeat(r) => r.error_code,
        _ => 0,
    }
}

/// The parts of a member that do not depend on its protocol; `S` is the member's record of what
/// a request was sent with.
#[derive(Debug)]
pub(crate) struct Shell<S> {
    pub(crate) config: GroupConfig,
    /// The latest `now` the member was given; never runs backwards.
    pub(crate) now: Instant,
    pub(crate) lookup: CoordinatorLookup,
    ids: RequestIds,
    in_flight: HashMap<RequestId, InFlight<S>>,
    /// The coordinator that answered the response being handled (set for one input).
    pub(crate) answered_by: Option<i32>,
    /// When the request being answered was queued (set for one input).
    pub(crate) answered_sent_at: Instant,
    /// The membership lease.
    pub(crate) lease: Lease,
    pub(crate) timers: TimerTable,
    pub(crate) backoff: ExponentialBackoff,
    pub(crate) rng: JitterRng,
    pub(crate) events: VecDeque<Event>,
    pub(crate) outbound: VecDeque<Outbound>,
    pub(crate) offsets: OffsetQueue,
    /// `close()` was called: the member only moves towards `Closed` from now on.
    pub(crate) close_requested: bool,
    /// What the answer to the leave of a close said, once read.
    left: Option<CloseOutcome>,
    join_wait: JoinWait,
    next_ticket: u64,
    next_op: u64,
}

impl<S> Shell<S> {
    /// The shell of a member of `config.group_id`, with its jitter seeded by `seed` (the lookup's
    /// by `seed + 1`, the retries of commits and fetches by `seed + 2`: a retried commit leaves
    /// the heartbeat's jitter as it was).
    pub(crate) fn new(config: GroupConfig, now: Instant, seed: u64) -> Self {
        let backoff = ExponentialBackoff::retry(config.retry_backoff, config.retry_backoff_max);
        let api_timeout = config.default_api_timeout;
        let mut lookup = CoordinatorLookup::new(
            [config.group_id.clone()],
            LookupConfig {
                backoff,
                request_timeout: config.request_timeout,
                seed: seed.wrapping_add(1),
            },
        );
        lookup.set_request_ids(RequestIds::starting_at(LOOKUP_IDS));
        Self {
            config,
            now,
            lookup,
            ids: RequestIds::default(),
            in_flight: HashMap::new(),
            answered_by: None,
            answered_sent_at: now,
            lease: Lease::default(),
            timers: TimerTable::default(),
            backoff,
            rng: JitterRng::from_seed(seed),
            events: VecDeque::new(),
            outbound: VecDeque::new(),
            offsets: OffsetQueue::new(backoff, api_timeout, seed.wrapping_add(2)),
            close_requested: false,
            left: None,
            join_wait: JoinWait::default(),
            next_ticket: 0,
            next_op: 0,
        }
    }

    /// Hands out request ids from `offset` on (and lookup ids from `LOOKUP_IDS + offset`): a
    /// member that takes over from another one (the `auto` fallback) must not reuse the ids of
    /// requests the other still has in flight, or their late answers would pass for its own.
    pub(crate) fn offset_request_ids(&mut self, offset: u64) {
        self.ids = RequestIds::starting_at(offset);
        self.lookup
            .set_request_ids(RequestIds::starting_at(LOOKUP_IDS + offset));
    }

    /// Moves the clock to `now` (time never runs backwards inside a member).
    pub(crate) fn advance(&mut self, now: Instant) {
        if now > self.now {
            self.now = now;
        }
    }

    /// A timer input at `now`: the clock moves, the lookup's timers fire, and the heartbeat and
    /// rejoin timers that are due are cleared (the member's `poll_request` sends what they
    /// held back).
    pub(crate) fn tick(&mut self, now: Instant) {
        self.advance(now);
        self.lookup.handle_timeout(self.now);
        self.timers.expire(Timer::Heartbeat, self.now);
        self.timers.expire(Timer::Rejoin, self.now);
        self.offsets.expire(self.now, &mut self.events);
        if self.timers.expire(Timer::NotJoined, self.now) && !self.close_requested {
            self.report_not_joined();
        }
    }

    /// [`Event::NotJoined`]: the member has waited `default.api.timeout.ms` to get in.
    fn report_not_joined(&mut self) {
        let Some(since) = self.join_wait.since else {
            return;
        };
        let after = self.now.saturating_duration_since(since);
        let wait = &self.join_wait;
        let last = wait.failed.clone().or_else(|| {
            let (api, broker) = wait.sent.clone()?;
            Some((api, broker, "no answer yet".to_owned(), None))
        });
        let error = match (self.coordinator(), last) {
            (Some(_), Some((api, broker, reason, transport))) => GroupError::TimedOut {
                api,
                broker,
                after,
                reason,
                transport: transport.map(Box::new),
            },
            // No coordinator (or none asked yet): the lookup is what the member waits on.
            _ => self.lookup.timed_out(&self.config.group_id, after),
        };
        tracing::warn!(group = %self.config.group_id, %error, "not in the group yet; still trying");
        self.events.push_back(Event::NotJoined { error });
    }

    /// Times the member's wait to get into the group from its state: a wait starts when it
    /// enters a joining state from another, and ends when it leaves them.
    fn time_join_wait(&mut self, state: MemberState) {
        match (waits_to_join(state), self.join_wait.since) {
            (true, None) => {
                self.join_wait = JoinWait {
                    since: Some(self.now),
                    ..JoinWait::default()
                };
                let at = super::timer::after(self.now, self.config.default_api_timeout);
                self.timers.set(Timer::NotJoined, at);
            }
            (false, Some(_)) => {
                self.join_wait = JoinWait::default();
                self.timers.stop(Timer::NotJoined);
            }
            _ => {}
        }
    }

    /// Whether `timer` was due at the current time (it is cleared then).
    pub(crate) fn expired(&mut self, timer: Timer) -> bool {
        self.timers.expire(timer, self.now)
    }

    /// The group's coordinator, when known.
    pub(crate) fn coordinator(&self) -> Option<&Broker> {
        self.lookup.coordinator(&self.config.group_id)
    }

    /// The group id, as requests carry it.
    pub(crate) fn group_id(&self) -> GroupId {
        GroupId(StrBytes::from_string(self.config.group_id.clone()))
    }

    /// The next revocation ticket number.
    pub(crate) fn next_ticket(&mut self) -> u64 {
        self.next_ticket += 1;
        self.next_ticket
    }

    /// The next commit or fetch number.
    pub(crate) fn next_op(&mut self) -> u64 {
        self.next_op += 1;
        self.next_op
    }

    /// Queues `request` for `target` with the member's request timeout; `sent` comes back with
    /// the answer.
    pub(crate) fn send(&mut self, target: Target, request: Request, sent: S) -> RequestId {
        let timeout = self.config.request_timeout;
        self.send_with_timeout(target, request, sent, timeout)
    }

    /// [`send`](Self::send) with a timeout of its own (a JoinGroup waits for the rebalance).
    pub(crate) fn send_with_timeout(
        &mut self,
        target: Target,
        request: Request,
        sent: S,
        timeout: Duration,
    ) -> RequestId {
        let id = self.ids.next();
        let node = match &target {
            Target::Coordinator(b) => Some(b.node_id),
            _ => None,
        };
        let broker = target
            .broker()
            .map_or_else(|| "(bootstrap)".to_owned(), Broker::addr);
        let api = request.api_key();
        if self.join_wait.since.is_some() && joins(api) {
            self.join_wait.sent = Some((api, broker.clone()));
        }
        let at = self.now;
        self.in_flight.insert(
            id,
            InFlight {
                sent,
                node,
                api,
                broker,
                at,
            },
        );
        self.outbound.push_back(Outbound {
            id,
            target,
            request,
            timeout,
        });
        id
    }

    /// Queues a group request for the coordinator.
    pub(crate) fn send_to_coordinator(
        &mut self,
        coordinator: &Broker,
        body: RequestKind,
        (versions, fit): (RangeInclusive<i16>, Option<Fit>),
        sent: S,
        timeout: Duration,
    ) -> RequestId {
        let request = Request::Raw {
            body: Box::new(body),
            versions,
            fit,
        };
        self.send_with_timeout(
            Target::Coordinator(coordinator.clone()),
            request,
            sent,
            timeout,
        )
    }

    /// Queues a Metadata request for `topics` (all topics: `None`) to any broker; the member
    /// never creates topics.
    pub(crate) fn send_metadata(&mut self, topics: Option<Vec<String>>, sent: S) -> RequestId {
        let request = Request::Metadata {
            topics,
            allow_auto_topic_creation: false,
        };
        self.send(Target::Bootstrap, request, sent)
    }

    /// Moves the clock to `now` and routes an answer: the lookup's own go to the lookup (`None`), as do answers to nothing in
    /// flight; otherwise what the request was sent with, and `answered_by` names the coordinator
    /// it went to.
    pub(crate) fn route(
        &mut self,
        id: RequestId,
        result: Reply,
        now: Instant,
    ) -> Option<(S, Reply)> {
        self.advance(now);
        if self.lookup.is_waiting_for(id) {
            self.lookup.handle_response(id, result, self.now);
            return None;
        }
        let Some(InFlight {
            sent,
            node,
            api,
            broker,
            at,
        }) = self.in_flight.remove(&id)
        else {
            tracing::debug!(%id, "ignoring an answer to no request in flight");
            return None;
        };
        if self.join_wait.since.is_some() && joins(api) {
            let failure = match &result {
                Err(e) => Some((e.root().to_string(), Some(e.clone()))),
                Ok(r) => match join_error_code(&r.body) {
                    0 => None,
                    code => Some((
                        format!("error {code} ({})", crate::error::error_name(code)),
                        None,
                    )),
                },
            };
            if let Some((reason, transport)) = failure {
                self.join_wait.failed = Some((api, broker, reason, transport));
            }
        }
        self.answered_by = node;
        self.answered_sent_at = at;
        Some((sent, result))
    }

    /// What request `id`, if still in flight, was sent with.
    pub(crate) fn in_flight(&self, id: RequestId) -> Option<&S> {
        self.in_flight.get(&id).map(|f| &f.sent)
    }

    /// The lookup's next terminal failure (GROUP_AUTHORIZATION_FAILED, ...), for the member to
    /// stop on; its reports of persistent trouble go to the application as
    /// [`Event::ConnectionTrouble`] on the way.
    pub(crate) fn lookup_failure(&mut self) -> Option<GroupError> {
        while let Some(e) = self.lookup.poll_event() {
            match e {
                LookupEvent::Failed { error, .. } => return Some(error),
                LookupEvent::Trouble { broker, error, .. } => {
                    tracing::warn!(group = %self.config.group_id, %broker, %error, "coordinator lookup keeps failing; retrying with backoff");
                    self.events
                        .push_back(Event::ConnectionTrouble { broker, error });
                }
                LookupEvent::Found { .. } => {}
            }
        }
        None
    }

    /// The earliest of the member's deadlines that `acts_on` keeps and the lookup's.
    pub(crate) fn poll_timeout(&self, acts_on: impl Fn(Timer) -> bool) -> Option<(Instant, Timer)> {
        let offsets = (self.offsets.poll_timeout(self.now))
            .filter(|_| acts_on(Timer::Offsets))
            .map(|at| (at, Timer::Offsets));
        let own = self.timers.next_where(acts_on);
        [own, self.lookup.poll_timeout(), offsets]
            .into_iter()
            .flatten()
            .min()
    }

    /// The one funnel for state changes: moves `phase` to `next`, and when the state changes logs
    /// `from -> to (reason)` and tells the application.
    pub(crate) fn set_phase<P: PhaseName>(
        &mut self,
        phase: &mut P,
        next: P,
        reason: Reason,
        member_id: &dyn fmt::Display,
        generation: i32,
    ) {
        let from = phase.state();
        let to = next.state();
        *phase = next;
        self.time_join_wait(to);
        if from != to {
            tracing::info!(group = %self.config.group_id, member_id = %member_id, generation, "{from} -> {to} ({reason})");
            self.events.push_back(Event::StateChanged {
                from,
                to,
                reason,
                member_id: member_id.to_string(),
                generation,
            });
        }
    }

    /// The answer to a leave was read (`code`: its error code, 0 for none): while a close is
    /// under way it is the close's outcome (a leave sent before the close, by an unsubscribe or
    /// a poll timeout, counts too: it is the leave the close waited for).
    pub(crate) fn leave_answered(&mut self, result: &Reply, code: i16) {
        if self.close_requested {
            self.left = Some(match result {
                Err(e) => CloseOutcome::Failed(e.clone()),
                Ok(_) => CloseOutcome::Left {
                    error: (code != 0).then_some(code),
                },
            });
        }
    }

    /// How the close ended, once the member is `stopped` (see [`CloseOutcome`]): what the
    /// answer to its leave said, or [`CloseOutcome::NotDue`] when no leave was answered.
    pub(crate) fn close_outcome(&self, stopped: bool) -> Option<CloseOutcome> {
        stopped.then(|| self.left.clone().unwrap_or(CloseOutcome::NotDue))
    }

    /// The application gave `partitions` up itself: [`Event::Revoked`] (none: no event).
    pub(crate) fn report_revoked(&mut self, partitions: Vec<TopicPartition>) {
        if !partitions.is_empty() {
            self.events.push_back(Event::Revoked { partitions });
        }
    }

    /// The member lost `partitions` without a revocation: [`Event::Lost`] (none: no event).
    pub(crate) fn report_lost(&mut self, partitions: Vec<TopicPartition>, reason: Reason) {
        if !partitions.is_empty() {
            self.events.push_back(Event::Lost { partitions, reason });
        }
    }

    /// Fails every queued commit (not the fetches) with `e`.
    pub(crate) fn fail_commits(&mut self, e: CommitError) {
        self.offsets.fail_commits(&mut self.events, e);
    }

    /// Fails every queued commit and fetch with `e`.
    pub(crate) fn fail_offsets(&mut self, e: CommitError) {
        self.offsets.fail_all(&mut self.events, e);
    }

    /// A request to the coordinator failed, or its answer says the coordinator moved: look it
    /// up again, unless the request went to an earlier coordinator (see
    /// [`CoordinatorLookup::coordinator_failed`]).
    pub(crate) fn coordinator_failed(&mut self) {
        self.lookup
            .coordinator_failed(&self.config.group_id, self.answered_by);
    }

    /// The answer being handled confirmed the membership: the lease now runs `bound` from when
    /// its request went out (never backwards), and commits are accepted again.
    pub(crate) fn confirm_membership(&mut self, bound: Duration) {
        let at = self.answered_sent_at;
        let confirmed = self.lease.confirmed.map_or(at, |c| c.max(at));
        self.lease = Lease {
            confirmed: Some(confirmed),
            expired: false,
        };
        self.timers
            .set(Timer::Lease, super::timer::after(confirmed, bound));
    }

    /// The group's session timeout became `session` (read from the cluster): a lease running now
    /// ends `bound` after its confirmation instead.
    pub(crate) fn set_group_session(
        &mut self,
        session: Duration,
        bound: impl Fn(&GroupConfig) -> Duration,
    ) {
        self.config.group_session_timeout = session;
        if let Some(c) = self.lease.confirmed {
            let at = super::timer::after(c, bound(&self.config));
            self.timers.set(Timer::Lease, at);
        }
    }

    /// The membership ended without the lease running out (left, fenced, rejoining): nothing is
    /// left to expire.
    pub(crate) fn end_lease(&mut self) {
        self.lease.confirmed = None;
        self.timers.stop(Timer::Lease);
    }

    /// Whether the lease ran out by the current time; it is then ended and marked expired.
    pub(crate) fn lease_ran_out(&mut self) -> bool {
        if !self.timers.expire(Timer::Lease, self.now) || self.lease.confirmed.is_none() {
            return false;
        }
        let since = self.lease.confirmed.take();
        self.lease.expired = true;
        tracing::warn!(group = %self.config.group_id, last_confirmed_ago = ?since.map(|c| self.now - c), "membership lease expired: no heartbeat answered within the session timeout less one heartbeat interval; the partitions are lost");
        true
    }

    /// The KIP-580 delay after `failures` failures in a row, and one failure more counted.
    pub(crate) fn backoff(&mut self, failures: &mut u32) -> Duration {
        let delay = self.backoff.delay(*failures, &mut self.rng);
        *failures = failures.saturating_add(1);
        delay
    }
}

/// A duration as the `i32` milliseconds requests carry, saturated.
pub(crate) fn millis(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}
