//! What every group member has besides its protocol: configuration, clock, coordinator lookup,
//! request ids and what each request in flight was sent with, timers, backoff and its seeded
//! jitter, the application's events, the requests waiting to go out, and the offsets queue.
//!
//! A member embeds one [`Shell`] and keeps only its protocol: its phases, what it sends and how
//! it reads the answers.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{GroupId, RequestKind};
use kafka_protocol::protocol::StrBytes;

use super::TopicPartition;
use super::coordinator::{CoordinatorLookup, LookupConfig, LookupEvent};
use super::events::{CommitError, Event};
use super::offsets::OffsetQueue;
use super::timer::{Timer, TimerTable};
use crate::backoff::{ExponentialBackoff, JitterRng};
use crate::config::GroupConfig;
use crate::error::{GroupError, TransportError};
use crate::request::{Broker, Outbound, Request, RequestId, RequestIds, Response, Target};

/// Where a member's coordinator lookup numbers its requests: far above the member's own ids.
pub(crate) const LOOKUP_IDS: u64 = 1 << 48;

/// A member's phase: a name for logs, events and tests.
pub(crate) trait PhaseName {
    /// The phase's name.
    fn name(&self) -> &'static str;
    /// Closed or stopped by a terminal error: the member only answers calls from now on.
    fn stopped(&self) -> bool;
    /// The phase of a member stopped by `error`.
    fn fatal(error: GroupError) -> Self;
}

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
    fn shell(&mut self) -> &mut Shell<Self::Sent>;
    /// The phase.
    fn phase(&self) -> &Self::Phase;
    /// Gives up every owned partition; returns them.
    fn take_owned(&mut self) -> Vec<TopicPartition>;

    /// Closed or stopped by a terminal error.
    fn stopped(&self) -> bool {
        self.phase().stopped()
    }

    /// The one funnel for state changes (see [`Shell::set_phase`]).
    fn set_phase(&mut self, next: Self::Phase, reason: &'static str) {
        let (shell, phase, member_id, generation) = self.parts();
        shell.set_phase(phase, next, reason, member_id, generation);
    }

    /// Stops on `error`: partitions lost, queued commits and fetches failed, the fatal phase,
    /// [`Event::Fatal`]. Once stopped, nothing more happens.
    fn fail(&mut self, error: GroupError) {
        if self.stopped() {
            return;
        }
        self.lose_owned("fatal error");
        tracing::error!(group = %self.shell().config.group_id, %error, "member stopped");
        self.shell()
            .fail_offsets(CommitError::Stopped(error.to_string()));
        self.set_phase(Self::Phase::fatal(error.clone()), "fatal error");
        self.shell().events.push_back(Event::Fatal(error));
    }

    /// The application gave its partitions up itself (close, unsubscribe): [`Event::Revoked`].
    fn release_owned(&mut self) {
        let partitions = self.take_owned();
        if !partitions.is_empty() {
            self.shell().events.push_back(Event::Revoked { partitions });
        }
    }

    /// The member lost its partitions without a revocation (fenced, stopped, poll timeout):
    /// [`Event::Lost`].
    fn lose_owned(&mut self, reason: &'static str) {
        let partitions = self.take_owned();
        if !partitions.is_empty() {
            self.shell()
                .events
                .push_back(Event::Lost { partitions, reason });
        }
    }
}

/// A request in flight: what it was sent with (`S`, the member's own record) and the
/// coordinator (node id) it went to, if it went to one.
#[derive(Debug, Clone)]
struct InFlight<S> {
    sent: S,
    node: Option<i32>,
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
    pub(crate) timers: TimerTable,
    pub(crate) backoff: ExponentialBackoff,
    pub(crate) rng: JitterRng,
    pub(crate) events: VecDeque<Event>,
    pub(crate) outbound: VecDeque<Outbound>,
    pub(crate) offsets: OffsetQueue,
    next_ticket: u64,
    next_op: u64,
}

impl<S> Shell<S> {
    /// The shell of a member of `config.group_id`, with its jitter seeded by `seed` (the lookup's
    /// by `seed + 1`).
    pub(crate) fn new(config: GroupConfig, now: Instant, seed: u64) -> Self {
        let backoff = ExponentialBackoff::retry(config.retry_backoff, config.retry_backoff_max);
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
            timers: TimerTable::default(),
            backoff,
            rng: JitterRng::from_seed(seed),
            events: VecDeque::new(),
            outbound: VecDeque::new(),
            offsets: OffsetQueue::default(),
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
        self.in_flight.insert(id, InFlight { sent, node });
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
        versions: RangeInclusive<i16>,
        sent: S,
        timeout: Duration,
    ) -> RequestId {
        let request = Request::Raw {
            body: Box::new(body),
            versions,
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

    /// Routes an answer: the lookup's own go to the lookup (`None`), as do answers to nothing in
    /// flight; otherwise what the request was sent with, and `answered_by` names the coordinator
    /// it went to.
    pub(crate) fn route(
        &mut self,
        id: RequestId,
        result: Result<Response, TransportError>,
    ) -> Option<(S, Result<Response, TransportError>)> {
        if self.lookup.is_waiting_for(id) {
            self.lookup.handle_response(id, result, self.now);
            return None;
        }
        let Some(InFlight { sent, node }) = self.in_flight.remove(&id) else {
            tracing::debug!(%id, "ignoring an answer to no request in flight");
            return None;
        };
        self.answered_by = node;
        Some((sent, result))
    }

    /// What request `id`, if still in flight, was sent with.
    pub(crate) fn in_flight(&self, id: RequestId) -> Option<&S> {
        self.in_flight.get(&id).map(|f| &f.sent)
    }

    /// The lookup's next terminal failure (GROUP_AUTHORIZATION_FAILED, ...), for the member to
    /// stop on.
    pub(crate) fn lookup_failure(&mut self) -> Option<GroupError> {
        while let Some(e) = self.lookup.poll_event() {
            if let LookupEvent::Failed { error, .. } = e {
                return Some(error);
            }
        }
        None
    }

    /// The earliest of the member's deadlines that `acts_on` keeps and the lookup's.
    pub(crate) fn poll_timeout(&self, acts_on: impl Fn(Timer) -> bool) -> Option<(Instant, Timer)> {
        let own = self.timers.next_where(acts_on);
        match (own, self.lookup.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The one funnel for state changes: moves `phase` to `next`, and when the name changes logs
    /// `from -> to (reason)` and tells the application.
    pub(crate) fn set_phase<P: PhaseName>(
        &mut self,
        phase: &mut P,
        next: P,
        reason: &'static str,
        member_id: &dyn fmt::Display,
        generation: i32,
    ) {
        let from = phase.name();
        let to = next.name();
        *phase = next;
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
