//! A share-group consumer, sans-IO: the [`ShareMember`] and its [`ShareSessions`] in one
//! [`Machine`], with the partition leaders it needs looked up by itself.
//!
//! ```text
//!  subscribe ──► member joins ──► assignment ──► Metadata (ids, leaders) ──► sessions
//!                                                                              │
//!  fetch_more ──► one ShareFetch per leader (acknowledgements ride on it) ◄────┘
//!                 records ──► events, fetching pauses until the next fetch_more
//!  close ──► sessions closed (ShareAcknowledge, epoch -1) ──► member leaves (epoch -1)
//! ```
//!
//! Rules kept:
//! - fetching follows the application ([`fetch_more`](ShareConsumer::fetch_more), the Java
//!   consumer's `poll()`): records acquired for the member are handed over, and no further
//!   records are acquired until the application asks again, so what it holds is bounded by one
//!   round of fetches and acquisition locks are not spent on records nobody reads. In
//!   [`AckMode::Implicit`] the records of one round are ACCEPTed with the next round's
//!   requests: `fetch_more` says the application is done with everything delivered;
//! - a leader is looked up by Metadata when the assignment names a partition whose leader is
//!   not known, and again when a fetch answer says it moved (`RefreshLeader`), with the
//!   member's KIP-580 backoff between failed lookups;
//! - a close first ends every share session (its pending acknowledgements go with the epoch -1
//!   ShareAcknowledge, as the Java client's `close()` commits them), then the member leaves
//!   with epoch -1 (`ShareConsumerImpl.close`: acknowledgements, then the leave). A close
//!   never waits longer than the requests' own timeouts.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use uuid::Uuid;

use super::ShareMember;
use super::session::{
    AckMode, AcknowledgeType, Acknowledged, ShareCall, ShareFetchError, ShareFetchSettings,
    ShareMisuse, ShareOutcome, SharePartition, ShareRecords, ShareSessions, ShareToken,
};
use crate::backoff::ExponentialBackoff;
use crate::backoff::JitterRng;
use crate::config::GroupConfig;
use crate::error::{ApiMisuse, ConfigError, TransportError};
use crate::machine::epoch::EpochProtocol;
use crate::machine::events::{CloseOptions, CloseOutcome, Event, MemberState};
use crate::machine::metadata::ClusterMetadata;
use crate::machine::{Machine, Timer, TopicPartition};
use crate::member_id::MemberId;
use crate::request::{Broker, Outbound, Request, RequestId, RequestIds, Response, Target};
use kafka_protocol::messages::ShareAcknowledgeRequest;

/// Request ids of the consumer's own requests (Metadata, ShareFetch, ShareAcknowledge): apart
/// from the member's.
const SHARE_IDS: u64 = 1 << 52;

/// What a [`ShareConsumer`] tells its application.
#[derive(Debug)]
#[non_exhaustive]
pub enum ShareEvent {
    /// The member's own events: assignment changes, state changes, errors, the close.
    Member(Event),
    /// Records acquired for the member, from `topic`.
    Records {
        /// The topic's name.
        topic: String,
        /// The records and the ranges acquired.
        records: ShareRecords,
    },
    /// An acknowledgement was answered (or failed): reported once each.
    Acknowledged(Acknowledged),
    /// A fetch failed (the sessions retry on their own).
    FetchError(ShareFetchError),
}

impl ShareEvent {
    /// Whether this is the consumer's last event (closed or stopped).
    pub fn ends(&self) -> bool {
        matches!(self, ShareEvent::Member(Event::Closed | Event::Fatal(_)))
    }
}

/// A request of the consumer's own, in flight.
#[derive(Debug, Clone, Copy)]
enum Sent {
    Metadata,
    Fetch(ShareToken),
    Ack(ShareToken),
}

/// What is known of a topic: its id and its partitions' leaders.
#[derive(Debug, Clone, Default)]
struct Topic {
    id: Uuid,
    leaders: BTreeMap<i32, i32>,
}

/// A KIP-932 share-group consumer as one sans-IO [`Machine`]: see the module docs.
#[derive(Debug)]
pub struct ShareConsumer {
    member: ShareMember,
    sessions: ShareSessions,
    ids: RequestIds,
    sent: HashMap<RequestId, Sent>,
    topics: BTreeMap<String, Topic>,
    /// The name of each topic id of `topics` (the first name in name order, should two names
    /// share an id).
    names: HashMap<Uuid, String>,
    brokers: BTreeMap<i32, Broker>,
    /// A Metadata lookup is needed (not before this instant).
    lookup: Option<Instant>,
    lookup_failures: u32,
    backoff: ExponentialBackoff,
    jitter: JitterRng,
    /// Session closes to send (the close's first round).
    closes: VecDeque<ShareCall<ShareAcknowledgeRequest>>,
    /// The assignment the sessions were last given.
    assigned: Vec<TopicPartition>,
    /// The member's partitions as last read, in its own order (by topic id): `assigned` is
    /// this sorted.
    assigned_by_id: Vec<TopicPartition>,
    /// The application asked for records it has not received yet.
    wanting: bool,
    /// A close was asked for: the sessions close, then the member.
    closing: Option<CloseOptions>,
    events: VecDeque<ShareEvent>,
    request_timeout: Duration,
    now: Instant,
}

impl ShareConsumer {
    /// A consumer of the share group `config.group_id` (an instance id is refused: share groups
    /// have no static membership), fetching with `settings`, acknowledging as `mode`. The
    /// member id is `config.member_id`, else derived from `config.seed` (as for every member).
    pub fn new(
        config: GroupConfig,
        settings: ShareFetchSettings,
        mode: AckMode,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        let member = ShareMember::new(config, now)?;
        let id = MemberId::parse(member.member_id()).map_err(|e| ConfigError {
            key: "member.id",
            rule: e.to_string(),
        })?;
        let config = member.config();
        let sessions = ShareSessions::new(config.group_id.clone(), id, settings, mode);
        let backoff = ExponentialBackoff::retry(config.retry_backoff, config.retry_backoff_max);
        let request_timeout = config.request_timeout;
        // Its own jitter sequence, apart from the member's (same seed, another stream).
        let jitter = JitterRng::from_seed(config.jitter_seed()? ^ 0x7368_6172_6500_0000);
        Ok(Self {
            member,
            sessions,
            ids: RequestIds::starting_at(SHARE_IDS),
            sent: HashMap::new(),
            topics: BTreeMap::new(),
            names: HashMap::new(),
            brokers: BTreeMap::new(),
            lookup: None,
            lookup_failures: 0,
            backoff,
            jitter,
            closes: VecDeque::new(),
            assigned: Vec::new(),
            assigned_by_id: Vec::new(),
            wanting: false,
            closing: None,
            events: VecDeque::new(),
            request_timeout,
            now,
        })
    }

    /// The member (its id, epoch, state, assignment).
    pub fn member(&self) -> &ShareMember {
        &self.member
    }

    /// The member id, the same for the consumer's whole life.
    pub fn member_id(&self) -> &str {
        self.member.member_id()
    }

    /// Where the member stands.
    pub fn state(&self) -> MemberState {
        self.member.state()
    }

    /// The share sessions (epochs per leader).
    pub fn sessions(&self) -> &ShareSessions {
        &self.sessions
    }

    /// How the close ended, once closed or stopped.
    pub fn close_outcome(&self) -> Option<CloseOutcome> {
        self.member.close_outcome()
    }

    /// Subscribes to `topics` (the member joins, or updates its subscription).
    pub fn subscribe(
        &mut self,
        topics: impl IntoIterator<Item = String>,
        now: Instant,
    ) -> Result<(), ApiMisuse> {
        self.advance(now);
        if self.closing.is_some() {
            return Err(ApiMisuse::Stopped);
        }
        let r = self.member.subscribe(topics, now);
        self.settle();
        r
    }

    /// The application polled (`max.poll.interval.ms`) and is done with every record it was
    /// handed: the next round of fetches goes out (in [`AckMode::Implicit`] it ACCEPTs what
    /// was delivered). Harmless while a round is under way.
    pub fn fetch_more(&mut self, now: Instant) {
        self.advance(now);
        self.member.poll(now);
        if self.closing.is_none() {
            self.wanting = true;
        }
        self.settle();
    }

    /// Tells the member the application polled at `at`, without asking for records.
    pub fn poll(&mut self, at: Instant) {
        self.member.poll(at);
        self.settle();
    }

    /// Acknowledges the delivered offsets `first..=last` of `partition` as `kind`
    /// ([`AckMode::Explicit`]): sent with the next request to their leader (the next
    /// [`fetch_more`](Self::fetch_more), or the close), and reported once as
    /// [`ShareEvent::Acknowledged`].
    pub fn acknowledge(
        &mut self,
        partition: SharePartition,
        first: i64,
        last: i64,
        kind: AcknowledgeType,
    ) -> Result<(), ShareMisuse> {
        self.sessions.acknowledge(partition, first, last, kind)
    }

    /// Closes: the share sessions end with their pending acknowledgements, then the member
    /// leaves with `options` (a share member always leaves with epoch -1 when it leaves).
    pub fn close(&mut self, options: CloseOptions, now: Instant) {
        self.advance(now);
        if self.closing.is_some() {
            return;
        }
        self.closing = Some(options);
        self.wanting = false;
        // Closes go to the leaders of the open sessions: no lookup is needed any more.
        self.lookup = None;
        let (calls, out) = self.sessions.close();
        self.closes.extend(calls);
        self.report(out);
        self.settle();
    }

    fn advance(&mut self, now: Instant) {
        self.now = self.now.max(now);
    }

    /// The member's events taken over, the sessions given the member's assignment, and the
    /// member closed once the sessions are.
    fn settle(&mut self) {
        while let Some(e) = self.member.poll_event() {
            self.events.push_back(ShareEvent::Member(e));
        }
        if let Some(assignment) = self.new_assignment() {
            self.assigned = assignment;
            self.assign();
        }
        if let Some(options) = self.closing
            && self.sessions.is_closed()
            && !matches!(
                self.member.state(),
                MemberState::Leaving | MemberState::Closed | MemberState::Fatal
            )
        {
            self.member.close(options, self.now);
            while let Some(e) = self.member.poll_event() {
                self.events.push_back(ShareEvent::Member(e));
            }
        }
    }

    /// The member's assignment, if it is not the one the sessions were last given. Its
    /// partitions are first compared in the member's own order with those read last time: an
    /// unchanged assignment (after almost every input) is not collected and sorted anew.
    fn new_assignment(&mut self) -> Option<Vec<TopicPartition>> {
        if let Some(ids) = self.member.proto.ids() {
            let mut named = ids.owned.iter().filter_map(|tp| ids.named(tp));
            let same = (self.assigned_by_id.iter()).all(|tp| named.next().as_ref() == Some(tp))
                && named.next().is_none();
            if same {
                return None;
            }
            self.assigned_by_id.clear();
            (self.assigned_by_id).extend(ids.owned.iter().filter_map(|tp| ids.named(tp)));
        }
        let assignment = self.member.assignment();
        (assignment != self.assigned).then_some(assignment)
    }

    /// Hands the sessions the assignment with each partition's leader; asks for Metadata when
    /// a topic or leader is not known.
    fn assign(&mut self) {
        let mut unknown = false;
        let mut partitions = Vec::with_capacity(self.assigned.len());
        for tp in &self.assigned {
            let Some(t) = self.topics.get(&*tp.topic) else {
                unknown = true;
                continue;
            };
            let leader = t.leaders.get(&tp.partition).copied();
            unknown |= leader.is_none();
            partitions.push((SharePartition::new(t.id, tp.partition), leader));
        }
        self.sessions.set_assignment(partitions);
        if unknown && self.lookup.is_none() && self.closing.is_none() {
            self.lookup = Some(self.now);
        }
    }

    fn next_id(&mut self, sent: Sent) -> RequestId {
        let id = self.ids.next();
        self.sent.insert(id, sent);
        id
    }

    fn lookup_in_flight(&self) -> bool {
        self.sent.values().any(|s| matches!(s, Sent::Metadata))
    }

    /// The next request of the consumer's own: a leader lookup, a session's close, a fetch.
    fn poll_own(&mut self) -> Option<Outbound> {
        if let Some(at) = self.lookup
            && self.closing.is_none()
            && !self.lookup_in_flight()
            && at <= self.now
            && !self.assigned.is_empty()
        {
            self.lookup = None;
            let mut topics: Vec<String> = self
                .assigned
                .iter()
                .map(|tp| tp.topic.to_string())
                .collect();
            topics.dedup();
            let id = self.next_id(Sent::Metadata);
            return Some(Outbound {
                id,
                target: Target::Bootstrap,
                request: Request::Metadata {
                    topics: Some(topics),
                    allow_auto_topic_creation: false,
                },
                timeout: self.request_timeout,
            });
        }
        if self.closing.is_some() {
            let call = match self.closes.pop_front() {
                Some(call) => call,
                None => {
                    let (call, out) = self.sessions.poll_close();
                    self.report(out);
                    call?
                }
            };
            let node = call.node;
            let body = RequestKind::ShareAcknowledge(call.request);
            return self.send_to_leader(node, Sent::Ack(call.token), body);
        }
        if !self.wanting {
            return None;
        }
        let call: ShareCall<_> = self.sessions.poll_fetch(self.now)?;
        let node = call.node;
        let body = RequestKind::ShareFetch(call.request);
        self.send_to_leader(node, Sent::Fetch(call.token), body)
    }

    fn send_to_leader(&mut self, node: i32, sent: Sent, body: RequestKind) -> Option<Outbound> {
        let broker = self.brokers.get(&node).cloned();
        let id = self.next_id(sent);
        let timeout = self.request_timeout + self.sessions.settings().max_wait;
        let Some(broker) = broker else {
            // Leaders come from the Metadata answer that named the broker: unreachable, but a
            // request that cannot go out fails as a transport error would.
            let error = TransportError::Disconnected {
                addr: format!("node {node}"),
                reason: "no address known for this broker".into(),
            };
            self.handle_own(id, Err(error));
            return None;
        };
        Some(Outbound {
            id,
            target: Target::Node(broker),
            request: Request::Raw {
                body: Box::new(body),
                versions: 1..=1,
                fit: None,
            },
            timeout,
        })
    }

    /// An answer to a request of the consumer's own.
    fn handle_own(&mut self, id: RequestId, result: Result<Response, TransportError>) {
        let Some(sent) = self.sent.remove(&id) else {
            return;
        };
        match sent {
            Sent::Metadata => self.on_metadata(result),
            Sent::Fetch(token) => {
                let answer = result.and_then(|r| match r.body.into_kafka() {
                    Some(ResponseKind::ShareFetch(r)) => Ok(r),
                    _ => Err(wrong_answer(ApiKey::ShareFetch, r.version)),
                });
                if let Ok(out) = self.sessions.handle_fetch(token, answer, self.now) {
                    if !out.records.is_empty() {
                        // One round delivered: the next waits for the application.
                        self.wanting = false;
                    }
                    self.report(out);
                }
            }
            Sent::Ack(token) => {
                let answer = result.and_then(|r| match r.body.into_kafka() {
                    Some(ResponseKind::ShareAcknowledge(r)) => Ok(r),
                    _ => Err(wrong_answer(ApiKey::ShareAcknowledge, r.version)),
                });
                if let Ok(out) = self.sessions.handle_ack(token, answer) {
                    self.report(out);
                }
            }
        }
    }

    fn on_metadata(&mut self, result: Result<Response, TransportError>) {
        // A lookup asked for while this one was in flight is this one's to answer.
        self.lookup = None;
        let metadata = match result.as_ref().map(ClusterMetadata::from_response) {
            Ok(Ok(m)) => m,
            Ok(Err(_)) | Err(_) => {
                self.lookup_failures = self.lookup_failures.saturating_add(1);
                let delay = self.backoff.delay(self.lookup_failures, &mut self.jitter);
                self.lookup = Some(self.now + delay);
                return;
            }
        };
        self.brokers.extend(metadata.brokers);
        let mut missing = false;
        for (name, t) in metadata.topics {
            if t.error_code != 0 || t.id.is_nil() {
                missing = true;
                continue;
            }
            missing |= t.leaders.len() < t.partitions.len();
            self.topics.insert(
                name,
                Topic {
                    id: t.id,
                    leaders: t.leaders,
                },
            );
        }
        self.names.clear();
        for (name, t) in &self.topics {
            self.names.entry(t.id).or_insert_with(|| name.clone());
        }
        if missing {
            self.lookup_failures = self.lookup_failures.saturating_add(1);
        } else {
            self.lookup_failures = 0;
        }
        self.assign();
        if let Some(at) = &mut self.lookup {
            // Still unknown: look again after the backoff.
            let delay = self.backoff.delay(self.lookup_failures, &mut self.jitter);
            *at = self.now + delay;
        }
    }

    /// What the sessions report, as events; moved leaders are looked up.
    fn report(&mut self, out: ShareOutcome) {
        for records in out.records {
            let topic = (self.names.get(&records.partition.topic_id))
                .cloned()
                .unwrap_or_default();
            self.events
                .push_back(ShareEvent::Records { topic, records });
        }
        self.events
            .extend((out.acknowledgements.into_iter()).map(ShareEvent::Acknowledged));
        self.events
            .extend(out.errors.into_iter().map(ShareEvent::FetchError));
        if !out.refresh.is_empty() {
            for r in &out.refresh {
                let name = self.names.get(&r.partition.topic_id);
                if let Some(t) = name.and_then(|n| self.topics.get_mut(n)) {
                    t.leaders.remove(&r.partition.partition);
                }
            }
            self.lookup.get_or_insert(self.now);
        }
    }

    /// The next request to send.
    pub fn poll_request(&mut self) -> Option<Outbound> {
        self.member.poll_request().or_else(|| {
            let out = self.poll_own();
            self.settle();
            out
        })
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<ShareEvent> {
        self.settle();
        self.events.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due.
    pub fn poll_timeout(&self) -> Option<(Instant, Timer)> {
        // A lookup waits for the one in flight; a leader's backoff matters only to fetches
        // (a close goes to every leader at once).
        let own = [
            (self.lookup)
                .filter(|_| self.closing.is_none() && !self.assigned.is_empty())
                .filter(|_| !self.lookup_in_flight())
                .map(|at| (at, Timer::MetadataRefresh)),
            (self.wanting && self.closing.is_none())
                .then(|| self.sessions.next_deadline())
                .flatten()
                .map(|at| (at, Timer::ShareFetch)),
        ];
        let member = self.member.poll_timeout();
        own.into_iter()
            .chain([member])
            .flatten()
            .min_by_key(|(at, _)| *at)
    }

    /// Feeds the outcome of a request this consumer emitted.
    pub fn handle_response(
        &mut self,
        id: RequestId,
        result: Result<Response, TransportError>,
        now: Instant,
    ) {
        self.advance(now);
        if self.sent.contains_key(&id) {
            self.handle_own(id, result);
        } else {
            self.member.handle_response(id, result, now);
        }
        self.settle();
    }

    /// Tells the consumer the time is `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.advance(now);
        self.member.handle_timeout(now);
        self.settle();
    }
}

fn wrong_answer(api: ApiKey, version: i16) -> TransportError {
    TransportError::Decode {
        api: api.into(),
        version,
        reason: "the answer is of another API".into(),
    }
}

impl Machine for ShareConsumer {
    type Event = ShareEvent;
    fn poll_request(&mut self) -> Option<Outbound> {
        ShareConsumer::poll_request(self)
    }
    fn poll_event(&mut self) -> Option<ShareEvent> {
        ShareConsumer::poll_event(self)
    }
    fn poll_timeout(&self) -> Option<(Instant, Timer)> {
        ShareConsumer::poll_timeout(self)
    }
    fn handle_response(
        &mut self,
        id: RequestId,
        result: Result<Response, TransportError>,
        now: Instant,
    ) {
        ShareConsumer::handle_response(self, id, result, now)
    }
    fn handle_timeout(&mut self, now: Instant) {
        ShareConsumer::handle_timeout(self, now)
    }
}
