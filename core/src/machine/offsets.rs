//! Offsets as a sub-machine of every member: the queue of commits and fetches waiting for the
//! coordinator, their requests, the reading of their answers and their retries. A member hands
//! it a `Fence` (who it is now) and applies the `Hint` it gets back; the fencing fields differ
//! only in meaning: the classic member sends its generation, the consumer member its epoch.
//!
//! Retries follow the Java client's `CommitRequestManager` (`OffsetCommitRequestState` /
//! `OffsetFetchRequestState`: a retriable error re-queues the request after the exponential
//! backoff, and COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR and REQUEST_TIMED_OUT mark the
//! coordinator unknown first) and `ConsumerCoordinator.commitOffsetsSync` (retried until the
//! call's timer, `default.api.timeout.ms`, runs out: then a `TimeoutException`). A retriable
//! answer ([`CommitError::is_retriable`]: the coordinator moving, loading or timing out, a
//! transport failure) goes out again after the member's seeded KIP-580 backoff, fenced anew by
//! who the member is then; a commit retried must still be for partitions the member owns
//! ([`CommitError::NotOwned`] otherwise). No outcome within `default.api.timeout.ms` of the call
//! is [`CommitError::TimedOut`], whether the request waits for a coordinator, its backoff or its
//! answer.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::{
    ApiKey, GroupId, OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest,
    OffsetFetchResponse, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::TopicPartition;
use super::events::{CommitError, CommitId, CommitOffset, CommittedOffset, Event, FetchId};
use crate::backoff::{ExponentialBackoff, JitterRng};
use crate::error::{ErrorAction, GroupError, TransportError, classify, codes, error_name};
use crate::request::{Fit, Response, ResponseBody};

/// Committed offsets by partition.
pub type Offsets = BTreeMap<TopicPartition, CommittedOffset>;

/// A commit or fetch waiting for the coordinator (or for its backoff after a retriable failure).
#[derive(Debug, Clone)]
enum Queued {
    Commit {
        id: CommitId,
        offsets: Vec<CommitOffset>,
        attempts: Attempts,
    },
    Fetch {
        id: FetchId,
        partitions: Vec<TopicPartition>,
        attempts: Attempts,
    },
}

impl Queued {
    fn attempts(&self) -> &Attempts {
        match self {
            Queued::Commit { attempts, .. } | Queued::Fetch { attempts, .. } => attempts,
        }
    }

    /// Its outcome, as the event that reports it.
    fn outcome(&self, error: CommitError) -> Event {
        match self {
            Queued::Commit { id, .. } => Event::Committed {
                id: *id,
                result: Err(error),
            },
            Queued::Fetch { id, .. } => Event::OffsetsFetched {
                id: *id,
                result: Err(error),
            },
        }
    }
}

/// The attempts of one commit or fetch: when its call runs out of time
/// (`default.api.timeout.ms` after it), how many attempts failed retriably, and when it may go
/// out again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Attempts {
    deadline: Instant,
    failures: u32,
    not_before: Option<Instant>,
}

/// Which protocol's fencing rules a member follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// Generation and member id (JoinGroup).
    Classic,
    /// Member epoch (KIP-848).
    Consumer,
}

/// Who the member is when a commit or fetch goes out or its answer comes back.
#[derive(Debug, Clone)]
pub(crate) struct Fence {
    pub(crate) protocol: Protocol,
    pub(crate) group: String,
    pub(crate) member_id: String,
    /// Classic: the generation; consumer: the member epoch.
    pub(crate) generation: i32,
    pub(crate) instance_id: Option<String>,
    /// Consumer: in the group with an epoch (a fetch then carries member id and epoch, and
    /// STALE_MEMBER_EPOCH is retriable).
    pub(crate) member: bool,
    /// Classic: a rebalance is under way (an error for an ended generation reads as
    /// REBALANCE_IN_PROGRESS).
    pub(crate) rebalancing: bool,
    pub(crate) commit_versions: RangeInclusive<i16>,
    pub(crate) fetch_versions: RangeInclusive<i16>,
}

/// What a commit or fetch in flight was sent with, and what it takes to send it again.
#[derive(Debug, Clone)]
pub(crate) enum SentOffsets {
    Commit {
        id: CommitId,
        generation: i32,
        member_id: String,
        partitions: Vec<TopicPartition>,
        offsets: Vec<CommitOffset>,
        attempts: Attempts,
    },
    Fetch {
        id: FetchId,
        partitions: Vec<TopicPartition>,
        attempts: Attempts,
    },
}

impl SentOffsets {
    /// The commit or fetch number (commits and fetches share one sequence).
    fn op(&self) -> u64 {
        match self {
            SentOffsets::Commit { id, .. } => id.0,
            SentOffsets::Fetch { id, .. } => id.0,
        }
    }

    /// The same commit or fetch, queued again.
    fn requeued(self, attempts: Attempts) -> Queued {
        match self {
            SentOffsets::Commit { id, offsets, .. } => Queued::Commit {
                id,
                offsets,
                attempts,
            },
            SentOffsets::Fetch { id, partitions, .. } => Queued::Fetch {
                id,
                partitions,
                attempts,
            },
        }
    }
}

/// What an offsets answer asks of the member, besides the event it produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Hint {
    /// Look the coordinator up again.
    Rediscover,
    /// REBALANCE_IN_PROGRESS (classic): rejoin if stable.
    Rejoin,
    /// UNKNOWN_MEMBER_ID for the current generation: forget member id and generation.
    ResetMemberId,
    /// ILLEGAL_GENERATION for the current generation: forget the generation.
    ResetGeneration,
    /// FENCED_INSTANCE_ID for the current generation.
    Fenced,
    /// A terminal refusal.
    Fatal(GroupError),
}

/// A commit or fetch request: its body, its versions and how it fits older ones, and what it was
/// sent with.
pub(crate) type Built = (RequestKind, (RangeInclusive<i16>, Option<Fit>), SentOffsets);

/// Commits and fetches waiting for the coordinator, in the order the application asked (one
/// waiting out its backoff holds back those behind it, so commits never overtake each other),
/// and the deadlines of those in flight.
#[derive(Debug, Clone)]
pub(crate) struct OffsetQueue {
    queued: VecDeque<Queued>,
    /// The deadline of each commit or fetch in flight, by number. One that ran out of time in
    /// flight was reported [`CommitError::TimedOut`] and left this map: its answer reports
    /// nothing more.
    in_flight: BTreeMap<u64, (Instant, OpKind)>,
    /// Stopped (closed or failed): nothing is retried or timed any more.
    stopped: bool,
    api_timeout: Duration,
    backoff: ExponentialBackoff,
    rng: JitterRng,
}

impl OffsetQueue {
    /// An empty queue retrying with `backoff` (its jitter drawn from `seed`) within
    /// `api_timeout` of each call.
    pub(crate) fn new(backoff: ExponentialBackoff, api_timeout: Duration, seed: u64) -> Self {
        Self {
            queued: VecDeque::new(),
            in_flight: BTreeMap::new(),
            stopped: false,
            api_timeout,
            backoff,
            rng: JitterRng::from_seed(seed),
        }
    }

    fn attempts(&self, now: Instant) -> Attempts {
        Attempts {
            deadline: super::timer::after(now, self.api_timeout),
            failures: 0,
            not_before: None,
        }
    }

    /// Queues a commit asked for at `now`, or answers it at once with `refusal`.
    pub(crate) fn commit(
        &mut self,
        id: CommitId,
        offsets: Vec<CommitOffset>,
        (refusal, now): (Option<CommitError>, Instant),
        events: &mut VecDeque<Event>,
    ) {
        let attempts = self.attempts(now);
        match refusal {
            Some(e) => events.push_back(Event::Committed { id, result: Err(e) }),
            None => self.queued.push_back(Queued::Commit {
                id,
                offsets,
                attempts,
            }),
        }
    }

    /// Queues a fetch asked for at `now`, or answers it at once with `refusal`.
    pub(crate) fn fetch(
        &mut self,
        id: FetchId,
        partitions: Vec<TopicPartition>,
        (refusal, now): (Option<CommitError>, Instant),
        events: &mut VecDeque<Event>,
    ) {
        let attempts = self.attempts(now);
        match refusal {
            Some(e) => events.push_back(Event::OffsetsFetched { id, result: Err(e) }),
            None => self.queued.push_back(Queued::Fetch {
                id,
                partitions,
                attempts,
            }),
        }
    }

    /// Nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// Fails everything queued with `error`: the member stopped, nothing is retried or timed
    /// from now on (the answers of those in flight are still reported).
    pub(crate) fn fail_all(&mut self, events: &mut VecDeque<Event>, error: CommitError) {
        self.stopped = true;
        for q in self.queued.drain(..) {
            events.push_back(q.outcome(error.clone()));
        }
    }

    /// Fails the queued commits with `error`; fetches stay queued.
    pub(crate) fn fail_commits(&mut self, events: &mut VecDeque<Event>, error: CommitError) {
        let queued = std::mem::take(&mut self.queued);
        for q in queued {
            match q {
                Queued::Commit { .. } => events.push_back(q.outcome(error.clone())),
                fetch => self.queued.push_back(fetch),
            }
        }
    }

    /// When the queue must be woken: the earliest deadline of a call, or the end of the backoff
    /// holding the queue back, if later than `now`.
    pub(crate) fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        if self.stopped {
            return None;
        }
        let backoff = (self.queued.front())
            .and_then(|q| q.attempts().not_before)
            .filter(|at| *at > now);
        let deadlines = (self.queued.iter().map(|q| q.attempts().deadline))
            .chain(self.in_flight.values().map(|(deadline, _)| *deadline));
        deadlines.chain(backoff).min()
    }

    /// At `now`: every call whose time ran out, queued or in flight, ends in
    /// [`CommitError::TimedOut`].
    pub(crate) fn expire(&mut self, now: Instant, events: &mut VecDeque<Event>) {
        if self.stopped {
            return;
        }
        let after = self.api_timeout;
        let queued = std::mem::take(&mut self.queued);
        for q in queued {
            if q.attempts().deadline <= now {
                events.push_back(q.outcome(CommitError::TimedOut { after }));
            } else {
                self.queued.push_back(q);
            }
        }
        let ran_out: Vec<(u64, OpKind)> = (self.in_flight.iter())
            .filter(|(_, (deadline, _))| *deadline <= now)
            .map(|(op, (_, kind))| (*op, *kind))
            .collect();
        for (op, kind) in ran_out {
            self.in_flight.remove(&op);
            events.push_back(match kind {
                OpKind::Commit => Event::Committed {
                    id: CommitId(op),
                    result: Err(CommitError::TimedOut { after }),
                },
                OpKind::Fetch => Event::OffsetsFetched {
                    id: FetchId(op),
                    result: Err(CommitError::TimedOut { after }),
                },
            });
        }
    }

    /// The next request at `now`, fenced by `fence`. A commit `refusal` (the member left its
    /// generation while the commit waited for the coordinator) fails instead of going out with
    /// whatever identity the member has now; a commit sent again must be for partitions in
    /// `owned`.
    pub(crate) fn next(
        &mut self,
        fence: &Fence,
        (refusal, owned): (Option<CommitError>, &BTreeSet<TopicPartition>),
        now: Instant,
        events: &mut VecDeque<Event>,
    ) -> Option<Built> {
        while let Some(q) = self.queued.front() {
            if q.attempts().not_before.is_some_and(|at| at > now) {
                return None;
            }
            let q = self.queued.pop_front()?;
            match q {
                Queued::Commit { id, .. } if let Some(e) = &refusal => {
                    events.push_back(Event::Committed {
                        id,
                        result: Err(e.clone()),
                    });
                }
                Queued::Commit { attempts, .. }
                    if attempts.failures > 0
                        && let Some(e) = not_owned(&q, owned) =>
                {
                    events.push_back(q.outcome(e));
                }
                Queued::Commit {
                    id,
                    offsets,
                    attempts,
                } => {
                    let (body, partitions) = commit_request(
                        &fence.group,
                        fence.generation,
                        &fence.member_id,
                        fence.instance_id.as_deref(),
                        offsets.clone(),
                    );
                    self.in_flight
                        .insert(id.0, (attempts.deadline, OpKind::Commit));
                    let sent = SentOffsets::Commit {
                        id,
                        generation: fence.generation,
                        member_id: fence.member_id.clone(),
                        partitions,
                        offsets,
                        attempts,
                    };
                    let versions = fence.commit_versions.clone();
                    return Some((RequestKind::OffsetCommit(body), (versions, None), sent));
                }
                Queued::Fetch {
                    id,
                    partitions,
                    attempts,
                } => {
                    // Member fields only for a consumer-protocol member in its group: the broker
                    // then checks them (v9). The classic member fetches without (the Java
                    // classic client).
                    let member = (fence.protocol == Protocol::Consumer && fence.member)
                        .then_some((fence.member_id.as_str(), fence.generation));
                    let body = fetch_request(&fence.group, member, partitions.clone());
                    let versions = fence.fetch_versions.clone();
                    let fit = Some(Fit(fit_fetch));
                    self.in_flight
                        .insert(id.0, (attempts.deadline, OpKind::Fetch));
                    let sent = SentOffsets::Fetch {
                        id,
                        partitions,
                        attempts,
                    };
                    return Some((RequestKind::OffsetFetch(body), (versions, fit), sent));
                }
            }
        }
        None
    }

    /// Reads the answer to a commit or fetch at `now`: the event for the application (none
    /// while the call is retried, or when it already timed out), and what the member must do
    /// about the answer.
    pub(crate) fn answer(
        &mut self,
        sent: SentOffsets,
        result: Result<Response, TransportError>,
        fence: &Fence,
        now: Instant,
    ) -> (Option<Event>, Option<Hint>) {
        let op = sent.op();
        let tracked = self.in_flight.remove(&op).is_some();
        let attempts = match &sent {
            SentOffsets::Commit { attempts, .. } | SentOffsets::Fetch { attempts, .. } => *attempts,
        };
        let (event, hint) = answer(sent.clone(), result, fence);
        if !tracked {
            // Reported TimedOut when its time ran out in flight, also when the member stopped
            // since (its answer reports nothing more).
            return (None, hint);
        }
        let retriable = match &event {
            Event::Committed { result, .. } => result.as_ref().err(),
            Event::OffsetsFetched { result, .. } => result.as_ref().err(),
            _ => None,
        }
        .is_some_and(CommitError::is_retriable);
        if !retriable || self.stopped {
            return (Some(event), hint);
        }
        if now >= attempts.deadline {
            let after = self.api_timeout;
            let q = sent.requeued(attempts);
            return (Some(q.outcome(CommitError::TimedOut { after })), hint);
        }
        let delay = self.backoff.delay(attempts.failures, &mut self.rng);
        let attempts = Attempts {
            failures: attempts.failures.saturating_add(1),
            not_before: Some(super::timer::after(now, delay)),
            ..attempts
        };
        tracing::debug!(
            op,
            failures = attempts.failures,
            ?delay,
            ?event,
            "offsets call retried after its backoff"
        );
        self.queued.push_front(sent.requeued(attempts));
        (None, hint)
    }
}

/// Which call a number in flight belongs to.
#[derive(Debug, Clone, Copy)]
enum OpKind {
    Commit,
    Fetch,
}

/// A commit for partitions outside `owned`, as the refusal that fails it.
fn not_owned(q: &Queued, owned: &BTreeSet<TopicPartition>) -> Option<CommitError> {
    let Queued::Commit { offsets, .. } = q else {
        return None;
    };
    let partitions: Vec<TopicPartition> = (offsets.iter())
        .map(|o| &o.partition)
        .filter(|tp| !owned.contains(*tp))
        .cloned()
        .collect();
    (!partitions.is_empty()).then_some(CommitError::NotOwned { partitions })
}

/// Fits an OffsetFetch body to `version`: member id and epoch exist from v9 on.
fn fit_fetch(body: RequestKind, version: i16) -> RequestKind {
    match body {
        RequestKind::OffsetFetch(mut r) if version < 9 => {
            for g in &mut r.groups {
                g.member_id = None;
                g.member_epoch = -1;
            }
            RequestKind::OffsetFetch(r)
        }
        other => other,
    }
}

/// Reads the answer to a commit or fetch: the event for the application, and what the member
/// must do about it.
fn answer(
    sent: SentOffsets,
    result: Result<Response, TransportError>,
    fence: &Fence,
) -> (Event, Option<Hint>) {
    match sent {
        SentOffsets::Commit {
            id,
            generation,
            member_id,
            partitions,
            ..
        } => {
            let (result, hint) = match result {
                Ok(Response {
                    body: ResponseBody::Kafka(ResponseKind::OffsetCommit(r)),
                    ..
                }) => match commit_answer(&r, &partitions) {
                    Ok(()) => (Ok(()), None),
                    Err((tp, code)) => {
                        let (e, hint) = commit_error(fence, generation, &member_id, tp, code);
                        (Err(e), hint)
                    }
                },
                other => unanswered(other),
            };
            (Event::Committed { id, result }, hint)
        }
        SentOffsets::Fetch { id, .. } => {
            let (result, hint) = match result {
                Ok(Response {
                    body: ResponseBody::Kafka(ResponseKind::OffsetFetch(r)),
                    ..
                }) => {
                    let result = fetch_answer(&r, &fence.group, |code, partition| {
                        match classify(ApiKey::OffsetFetch, code, &fence.group) {
                            ErrorAction::Proceed => Ok(()),
                            // Retried with the latest epoch only while still in the group.
                            ErrorAction::StaleEpoch if fence.member => {
                                Err(CommitError::Retriable { code })
                            }
                            ErrorAction::RetryBackoff | ErrorAction::Rediscover => {
                                Err(CommitError::Retriable { code })
                            }
                            _ => Err(CommitError::Rejected { partition, code }),
                        }
                    });
                    let rediscover = matches!(
                        result,
                        Err(CommitError::Retriable { code })
                            if matches!(classify(ApiKey::OffsetFetch, code, &fence.group), ErrorAction::Rediscover)
                    );
                    (result, rediscover.then_some(Hint::Rediscover))
                }
                other => unanswered(other),
            };
            (Event::OffsetsFetched { id, result }, hint)
        }
    }
}

/// A commit or fetch that got no answer of its kind: a transport failure (the coordinator is
/// looked up again) or a body of another API.
fn unanswered<T>(
    result: Result<Response, TransportError>,
) -> (Result<T, CommitError>, Option<Hint>) {
    match result {
        Err(e) => (Err(e.into()), Some(Hint::Rediscover)),
        Ok(_) => (
            Err(CommitError::Rejected {
                partition: None,
                code: codes::UNKNOWN_SERVER_ERROR,
            }),
            None,
        ),
    }
}

/// What a commit error means, given the generation (or epoch) and member id the commit was sent
/// with (KAFKA-9823), and what the member must do.
fn commit_error(
    fence: &Fence,
    generation: i32,
    member_id: &str,
    tp: Option<TopicPartition>,
    code: i16,
) -> (CommitError, Option<Hint>) {
    let action = classify(ApiKey::OffsetCommit, code, &fence.group);
    match fence.protocol {
        Protocol::Classic => {
            let current = generation == fence.generation && member_id == fence.member_id;
            match action {
                ErrorAction::RejoinNow => (CommitError::RebalanceInProgress, Some(Hint::Rejoin)),
                ErrorAction::ResetMemberId | ErrorAction::ResetGeneration | ErrorAction::Fenced
                    if !current =>
                {
                    let e = if fence.rebalancing {
                        CommitError::RebalanceInProgress
                    } else {
                        CommitError::NotMember {
                            reason: format!("sent with generation {generation}, which has ended"),
                        }
                    };
                    (e, None)
                }
                ErrorAction::ResetMemberId => (
                    CommitError::NotMember {
                        reason: "UNKNOWN_MEMBER_ID".into(),
                    },
                    Some(Hint::ResetMemberId),
                ),
                ErrorAction::ResetGeneration => (
                    CommitError::NotMember {
                        reason: "ILLEGAL_GENERATION".into(),
                    },
                    Some(Hint::ResetGeneration),
                ),
                ErrorAction::Fenced => (
                    CommitError::FencedInstanceId {
                        instance_id: fence.instance_id.clone().unwrap_or_default(),
                    },
                    Some(Hint::Fenced),
                ),
                ErrorAction::Rediscover => {
                    (CommitError::Retriable { code }, Some(Hint::Rediscover))
                }
                ErrorAction::RetryBackoff => (CommitError::Retriable { code }, None),
                ErrorAction::Fatal(error @ GroupError::GroupAuthorizationFailed { .. }) => {
                    (CommitError::Fatal(error.clone()), Some(Hint::Fatal(error)))
                }
                _ => (
                    CommitError::Rejected {
                        partition: tp,
                        code,
                    },
                    None,
                ),
            }
        }
        Protocol::Consumer => match action {
            // Retried by the caller with the latest epoch while still a member; never a silent
            // fallback.
            ErrorAction::StaleEpoch if fence.member => (CommitError::Retriable { code }, None),
            ErrorAction::StaleEpoch | ErrorAction::ResetMemberId | ErrorAction::ResetGeneration => {
                (
                    CommitError::NotMember {
                        reason: format!("sent with epoch {generation}: {}", error_name(code)),
                    },
                    None,
                )
            }
            ErrorAction::Rediscover => (CommitError::Retriable { code }, Some(Hint::Rediscover)),
            ErrorAction::RetryBackoff => (CommitError::Retriable { code }, None),
            ErrorAction::RejoinNow => (CommitError::RebalanceInProgress, None),
            _ => (
                CommitError::Rejected {
                    partition: tp,
                    code,
                },
                None,
            ),
        },
    }
}

fn name(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// An OffsetCommit body carrying the member's fencing fields, and the partitions it commits.
fn commit_request(
    group: &str,
    generation_or_epoch: i32,
    member_id: &str,
    instance_id: Option<&str>,
    offsets: Vec<CommitOffset>,
) -> (OffsetCommitRequest, Vec<TopicPartition>) {
    let partitions = offsets.iter().map(|o| o.partition.clone()).collect();
    let mut by_topic: BTreeMap<String, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for o in offsets {
        by_topic
            .entry(o.partition.topic.to_string())
            .or_default()
            .push(
                OffsetCommitRequestPartition::default()
                    .with_partition_index(o.partition.partition)
                    .with_committed_offset(o.offset)
                    .with_committed_leader_epoch(-1)
                    .with_committed_metadata(o.metadata.map(StrBytes::from_string)),
            );
    }
    let body = OffsetCommitRequest::default()
        .with_group_id(GroupId(name(group)))
        .with_generation_id_or_member_epoch(generation_or_epoch)
        .with_member_id(name(member_id))
        .with_group_instance_id(instance_id.map(name))
        .with_topics(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    OffsetCommitRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(t)))
                        .with_partitions(ps)
                })
                .collect(),
        );
    (body, partitions)
}

/// What an OffsetCommit answer says: `Ok` when every partition sent was answered without error,
/// else the first partition error, or code -1 for a partition the answer left out (a silent gap
/// would be a lost commit).
fn commit_answer(
    r: &OffsetCommitResponse,
    sent: &[TopicPartition],
) -> Result<(), (Option<TopicPartition>, i16)> {
    let mut answered = BTreeSet::new();
    for t in &r.topics {
        for p in &t.partitions {
            let tp = TopicPartition::new(t.name.to_string(), p.partition_index);
            if p.error_code != codes::NONE {
                return Err((Some(tp), p.error_code));
            }
            answered.insert(tp);
        }
    }
    match sent.iter().find(|p| !answered.contains(*p)) {
        None => Ok(()),
        Some(missing) => Err((Some(missing.clone()), -1)),
    }
}

/// An OffsetFetch body (v8+ batched form, RequireStable); `member` is `(member id, epoch)` for a
/// consumer-protocol member in its group (v9).
fn fetch_request(
    group: &str,
    member: Option<(&str, i32)>,
    partitions: Vec<TopicPartition>,
) -> OffsetFetchRequest {
    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        by_topic
            .entry(tp.topic.to_string())
            .or_default()
            .push(tp.partition);
    }
    let group = OffsetFetchRequestGroup::default()
        .with_group_id(GroupId(name(group)))
        .with_member_id(member.map(|(id, _)| name(id)))
        .with_member_epoch(member.map_or(-1, |(_, epoch)| epoch))
        .with_topics(Some(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    OffsetFetchRequestTopics::default()
                        .with_name(TopicName(StrBytes::from_string(t)))
                        .with_partition_indexes(ps)
                })
                .collect(),
        ));
    OffsetFetchRequest::default()
        .with_groups(vec![group])
        .with_require_stable(true)
}

/// Reads an OffsetFetch answer for `group`; `check` maps a non-zero group or partition code to
/// the error to return.
fn fetch_answer(
    r: &OffsetFetchResponse,
    group: &str,
    check: impl Fn(i16, Option<TopicPartition>) -> Result<(), CommitError>,
) -> Result<Offsets, CommitError> {
    let g = r
        .groups
        .iter()
        .find(|g| g.group_id.as_str() == group)
        .ok_or(CommitError::Rejected {
            partition: None,
            code: codes::UNKNOWN_SERVER_ERROR,
        })?;
    check(g.error_code, None)?;
    let mut out = BTreeMap::new();
    for t in &g.topics {
        for p in &t.partitions {
            let tp = TopicPartition::new(t.name.to_string(), p.partition_index);
            check(p.error_code, Some(tp.clone()))?;
            out.insert(
                tp,
                CommittedOffset {
                    offset: (p.committed_offset >= 0).then_some(p.committed_offset),
                    metadata: p.metadata.as_ref().map(|m| m.to_string()),
                },
            );
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::offset_commit_response::{
        OffsetCommitResponsePartition, OffsetCommitResponseTopic,
    };

    fn answer(parts: &[(i32, i16)]) -> OffsetCommitResponse {
        OffsetCommitResponse::default().with_topics(vec![
            OffsetCommitResponseTopic::default()
                .with_name(TopicName(name("t")))
                .with_partitions(
                    parts
                        .iter()
                        .map(|&(p, code)| {
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(p)
                                .with_error_code(code)
                        })
                        .collect(),
                ),
        ])
    }

    #[test]
    fn commit_answers_must_cover_every_partition() {
        let sent = vec![TopicPartition::new("t", 0), TopicPartition::new("t", 1)];
        assert_eq!(commit_answer(&answer(&[(0, 0), (1, 0)]), &sent), Ok(()));
        assert_eq!(
            commit_answer(&answer(&[(0, 0), (1, 22)]), &sent),
            Err((Some(TopicPartition::new("t", 1)), 22))
        );
        assert_eq!(
            commit_answer(&answer(&[(0, 0)]), &sent),
            Err((Some(TopicPartition::new("t", 1)), -1))
        );
    }

    #[test]
    fn commit_request_groups_by_topic_and_carries_fencing_fields() {
        let offsets = vec![
            CommitOffset {
                partition: TopicPartition::new("b", 1),
                offset: 5,
                metadata: None,
            },
            CommitOffset {
                partition: TopicPartition::new("a", 0),
                offset: 7,
                metadata: Some("m".into()),
            },
        ];
        let (r, parts) = commit_request("g", 3, "m-1", Some("i"), offsets);
        assert_eq!(parts.len(), 2);
        assert_eq!(
            (
                r.generation_id_or_member_epoch,
                r.member_id.as_str(),
                r.group_instance_id.as_deref()
            ),
            (3, "m-1", Some("i"))
        );
        assert_eq!(
            r.topics.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            vec!["a", "b"]
        );
        let f = fetch_request("g", Some(("m-1", 4)), vec![TopicPartition::new("a", 0)]);
        assert_eq!(
            (
                f.groups[0].member_id.as_deref(),
                f.groups[0].member_epoch,
                f.require_stable
            ),
            (Some("m-1"), 4, true)
        );
        let f = fetch_request("g", None, vec![]);
        assert_eq!(
            (f.groups[0].member_id.as_deref(), f.groups[0].member_epoch),
            (None, -1)
        );
    }
}
