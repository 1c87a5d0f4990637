//! KIP-932 share sessions (sans-IO): fetching and acknowledging records of a share group with
//! ShareFetch v1 and ShareAcknowledge v1, one session per partition leader, under the member id
//! of a [`ShareMember`](super::ShareMember).
//!
//! ```text
//!            answer ok: epoch + 1 (i32::MAX -> 1)
//!          ┌──────────┐
//!          ▼          │
//! epoch 0 ───────► epoch n ──── close ────► epoch -1 (ShareAcknowledge) ──► closed
//!    ▲                │
//!    └────────────────┘ request-level error, transport failure: reopen (all partitions again)
//! ```
//!
//! Rules kept (the Java client's `ShareSessionHandler` / `ShareFetchMetadata` and the broker's
//! `ShareSessionCache` / `SharePartitionManager`, Kafka 4.x):
//! - one session per leader, keyed by the member id, with at most one request in flight;
//! - epoch 0 opens the session and lists every partition this leader leads; later requests are
//!   incremental: partitions new to the session, partitions with acknowledgements, and the
//!   partitions it should drop in ForgottenTopicsData (`ShareSession.update` adds, then
//!   forgets: a partition may be in both when its last acknowledgements leave with its removal);
//! - the epoch advances only on an answer without a request-level error, and wraps from
//!   `i32::MAX` to 1 (`ShareRequestMetadata.nextEpoch`);
//! - a request-level error or a transport failure ends the session on this side: its
//!   acknowledgements are reported failed and the next request is epoch 0, which replaces the
//!   member's session on that broker (`SharePartitionManager.newContext` removes the old one).
//!   The Java handler does so after SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH,
//!   SHARE_SESSION_LIMIT_REACHED and transport failures (`nextCloseExistingAttemptNew`); after
//!   other request-level errors it sends the next epoch, which the broker (that did not advance
//!   it) answers with INVALID_SHARE_SESSION_EPOCH: reopening at once saves that round trip;
//! - acknowledgements never ride on an epoch 0 request (`newContext` refuses them with
//!   INVALID_REQUEST): those pending when a session ends are reported failed;
//! - a partition whose answer says its leader moved (NOT_LEADER_OR_FOLLOWER,
//!   FENCED_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID, UNKNOWN_LEADER_EPOCH)
//!   waits for a new leader from [`ShareSessions::set_assignment`] and is reported as a
//!   [`RefreshLeader`] need;
//! - every acknowledgement is reported exactly once, and as a success only when the broker
//!   answered its partition with no error;
//! - [`ShareSessions::close`] ends each open session with a ShareAcknowledge at epoch -1
//!   carrying the acknowledgements still pending; nothing is sent afterwards.
//!
//! Records stay bytes: the application decodes the record batches and acknowledges offsets
//! (GAP for offsets in an acquired range that hold no record, as the Java client does).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::share_acknowledge_request as ack_req;
use kafka_protocol::messages::share_fetch_request as fetch_req;
use kafka_protocol::messages::{
    GroupId, ShareAcknowledgeRequest, ShareAcknowledgeResponse, ShareFetchRequest,
    ShareFetchResponse,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::error::TransportError;
use crate::member_id::MemberId;

/// A partition of a share group's topic, by topic id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SharePartition {
    /// The topic id.
    pub topic_id: Uuid,
    /// The partition index.
    pub partition: i32,
}

impl SharePartition {
    /// Partition `partition` of the topic `topic_id`.
    pub fn new(topic_id: Uuid, partition: i32) -> Self {
        Self {
            topic_id,
            partition,
        }
    }
}

/// How delivered records are acknowledged (`share.acknowledgement.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AckMode {
    /// Every delivered record is acknowledged by [`ShareSessions::acknowledge`].
    #[default]
    Explicit,
    /// Every delivered record is ACCEPTed on the next request to its leader; `acknowledge` is
    /// refused (the Java client's `implicit` mode).
    Implicit,
}

/// An acknowledgement type of ShareFetch / ShareAcknowledge v1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcknowledgeType {
    /// 0: offsets with no record (compacted away, control records).
    Gap,
    /// 1: processed; never delivered again.
    Accept,
    /// 2: released for another delivery (the delivery count still grows).
    Release,
    /// 3: not processable; never delivered again.
    Reject,
}

impl AcknowledgeType {
    /// The wire value.
    pub fn code(self) -> i8 {
        match self {
            Self::Gap => 0,
            Self::Accept => 1,
            Self::Release => 2,
            Self::Reject => 3,
        }
    }
}

/// What a share fetch asks for (the Java consumer's `fetch.max.wait.ms`, `fetch.min.bytes`,
/// `fetch.max.bytes`, `max.poll.records`), and the backoff after a failed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareFetchSettings {
    /// MaxWaitMs: how long the broker may hold the request for data.
    pub max_wait: Duration,
    /// MinBytes.
    pub min_bytes: i32,
    /// MaxBytes.
    pub max_bytes: i32,
    /// MaxRecords: at most this many records acquired by one request.
    pub max_records: i32,
    /// BatchSize: the acquisition batch size the broker aims for.
    pub batch_size: i32,
    /// The wait before the next request to a leader after a failed one (`retry.backoff.ms`);
    /// doubled on each failure in a row up to [`retry_backoff_max`](Self::retry_backoff_max).
    pub retry_backoff: Duration,
    /// The longest wait after failures (`retry.backoff.max.ms`).
    pub retry_backoff_max: Duration,
}

impl Default for ShareFetchSettings {
    /// The Java consumer's defaults: 500 ms, 1 byte, 50 MiB, 500 records (BatchSize is
    /// `max.poll.records`), 100 ms backoff up to 1 s.
    fn default() -> Self {
        Self {
            max_wait: Duration::from_millis(500),
            min_bytes: 1,
            max_bytes: 52_428_800,
            max_records: 500,
            batch_size: 500,
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
        }
    }
}

/// Identifies one request of [`ShareSessions`]; its answer is handed back with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShareToken(u64);

/// A request to send to the broker `node` (the partitions' leader).
#[derive(Debug, Clone, PartialEq)]
pub struct ShareCall<R> {
    /// The broker's node id.
    pub node: i32,
    /// The request, to send at version 1.
    pub request: R,
    /// To pass back with its answer.
    pub token: ShareToken,
}

/// A misuse of [`ShareSessions`]'s API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShareMisuse {
    /// The token is not one of a request in flight (answered already, or never made).
    #[error("no share request in flight has this token")]
    UnknownToken,
    /// The answer is for the other API (a ShareFetch token given to `handle_ack`, or back).
    #[error("the token belongs to a request of the other API")]
    WrongApi,
    /// [`ShareSessions::close`] was called.
    #[error("the share sessions are closed")]
    Closed,
    /// Acknowledgements are implicit ([`AckMode::Implicit`]).
    #[error("acknowledgements are implicit in this mode")]
    ImplicitMode,
    /// The range is not made of delivered offsets awaiting acknowledgement (not delivered,
    /// already acknowledged, or `first > last`).
    #[error("offsets {first}..={last} of {partition:?} are not delivered and unacknowledged")]
    NotDelivered {
        /// The partition.
        partition: SharePartition,
        /// The first offset asked.
        first: i64,
        /// The last offset asked.
        last: i64,
    },
}

/// Records acquired for this member, as the broker sent them.
#[derive(Debug, Clone, PartialEq)]
pub struct ShareRecords {
    /// The partition.
    pub partition: SharePartition,
    /// The record batches, undecoded.
    pub records: Bytes,
    /// The offset ranges acquired, each to be acknowledged (offsets outside them are not this
    /// member's).
    pub acquired: Vec<AcquiredRange>,
}

/// Offsets `first..=last` acquired for this member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquiredRange {
    /// The first offset.
    pub first: i64,
    /// The last offset (inclusive).
    pub last: i64,
    /// How many times these records were delivered, this time included.
    pub delivery_count: i16,
}

/// Why an acknowledgement failed. The records are then delivered again after their
/// acquisition lock expires (or were released with the session).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AckError {
    /// The broker answered the partition (or the whole request) with this error code.
    #[error("broker error {code}: {message:?}")]
    Broker {
        /// The Kafka error code.
        code: i16,
        /// The broker's message, if any.
        message: Option<String>,
    },
    /// The request failed in transport: its fate is unknown.
    #[error("transport: {0}")]
    Transport(TransportError),
    /// The answer did not mention the partition.
    #[error("the answer did not mention the partition")]
    NotAnswered,
    /// The session ended before the acknowledgement could be sent (it cannot ride on a new
    /// session's first request, and no session was to be opened), or the sessions were closed.
    #[error("the share session ended before it was sent")]
    SessionEnded,
}

/// The outcome of one acknowledgement batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acknowledged {
    /// The partition.
    pub partition: SharePartition,
    /// The first offset.
    pub first: i64,
    /// The last offset (inclusive).
    pub last: i64,
    /// The type acknowledged.
    pub kind: AcknowledgeType,
    /// Whether the broker applied it.
    pub result: Result<(), AckError>,
}

/// A partition whose leader must be looked up again: it is fetched no more until
/// [`ShareSessions::set_assignment`] names a leader again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefreshLeader {
    /// The partition.
    pub partition: SharePartition,
    /// The error that says the leader moved.
    pub code: i16,
    /// The broker's hint of the new leader (CurrentLeader with its NodeEndpoints entry), when
    /// it gave one.
    pub hint: Option<LeaderHint>,
}

/// A new leader the broker named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderHint {
    /// Its node id.
    pub node: i32,
    /// Its leader epoch.
    pub leader_epoch: i32,
    /// Its host and port, when the answer's NodeEndpoints had them.
    pub endpoint: Option<(String, i32)>,
}

/// A failure the application may want to see (acknowledgements report their own).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShareFetchError {
    /// The whole request was refused: the session is reopened after a backoff.
    Request {
        /// The broker.
        node: i32,
        /// The Kafka error code.
        code: i16,
        /// The broker's message.
        message: Option<String>,
    },
    /// The request failed in transport: the session is reopened after a backoff.
    Transport {
        /// The broker.
        node: i32,
        /// The failure.
        error: TransportError,
    },
    /// One partition's fetch failed with an error other than a leader move.
    Partition {
        /// The partition.
        partition: SharePartition,
        /// The Kafka error code.
        code: i16,
        /// The broker's message.
        message: Option<String>,
    },
    /// The broker sent something impossible (a range with `first > last`, records of a
    /// partition it was not asked for): not delivered.
    BadAnswer {
        /// The broker.
        node: i32,
        /// What was wrong.
        reason: String,
    },
}

/// What an answer (or a failure) brought.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShareOutcome {
    /// Records acquired for the member.
    pub records: Vec<ShareRecords>,
    /// The acknowledgements this request carried, each reported once.
    pub acknowledgements: Vec<Acknowledged>,
    /// Partitions whose leader must be looked up again.
    pub refresh: Vec<RefreshLeader>,
    /// Other failures.
    pub errors: Vec<ShareFetchError>,
    /// AcquisitionLockTimeoutMs: how long the records stay acquired (ShareFetch answers).
    pub acquisition_lock_timeout: Option<Duration>,
}

/// An acknowledgement not yet answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PendingAck {
    partition: SharePartition,
    first: i64,
    last: i64,
    kind: AcknowledgeType,
    /// Sent by the sessions themselves (RELEASE of records the member no longer wants): its
    /// outcome is not reported.
    internal: bool,
}

impl PendingAck {
    fn outcome(self, result: Result<(), AckError>) -> Option<Acknowledged> {
        (!self.internal).then_some(Acknowledged {
            partition: self.partition,
            first: self.first,
            last: self.last,
            kind: self.kind,
            result,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Fetch,
    Acknowledge,
}

#[derive(Debug)]
struct InFlight {
    token: u64,
    api: Api,
    /// The partitions the broker's session holds once it applied the request.
    session_after: BTreeSet<SharePartition>,
    acks: Vec<PendingAck>,
}

/// One leader's share session.
#[derive(Debug, Default)]
struct Leader {
    /// The epoch of the next request: 0 opens a session.
    epoch: i32,
    /// The partitions the broker's session holds (empty while no session is open).
    session: BTreeSet<SharePartition>,
    /// Acknowledgements waiting for the next request.
    acks: Vec<PendingAck>,
    in_flight: Option<InFlight>,
    /// Failed requests in a row.
    failures: u32,
    /// No request before this instant.
    retry_at: Option<Instant>,
    /// Closed with epoch -1 (or closing): nothing more is sent.
    closed: bool,
}

impl Leader {
    fn open(&self) -> bool {
        self.epoch > 0
    }

    /// Forgets the session on this side: the next request is epoch 0.
    fn reset(&mut self) {
        self.epoch = 0;
        self.session.clear();
    }
}

/// Delivered offsets awaiting an explicit acknowledgement, by partition and the leader that
/// delivered them (acknowledgements go to the session that acquired), as disjoint
/// `first -> last` ranges.
type Delivered = BTreeMap<(SharePartition, i32), BTreeMap<i64, i64>>;

/// Next epoch after a successful answer: 1, 2, ..., `i32::MAX`, 1 (`ShareRequestMetadata`).
fn next_epoch(epoch: i32) -> i32 {
    if (1..i32::MAX).contains(&epoch) {
        epoch + 1
    } else {
        1
    }
}

/// The errors that say a partition's leader is elsewhere: look it up again (the Java client's
/// `ShareConsumeRequestManager` requests a metadata update for these).
fn leader_moved(code: i16) -> bool {
    [
        ResponseError::NotLeaderOrFollower,
        ResponseError::FencedLeaderEpoch,
        ResponseError::UnknownTopicOrPartition,
        ResponseError::UnknownTopicId,
        ResponseError::UnknownLeaderEpoch,
    ]
    .iter()
    .any(|e| e.code() == code)
}

fn text(s: &Option<StrBytes>) -> Option<String> {
    s.as_ref().map(|s| s.to_string())
}

/// The share sessions of one share-group member with every partition leader (sans-IO).
///
/// Owned by the application next to its [`ShareMember`](super::ShareMember): it feeds in the
/// assignment with each partition's leader ([`set_assignment`](Self::set_assignment)), takes
/// requests from [`poll_fetch`](Self::poll_fetch) (and [`close`](Self::close) /
/// [`poll_close`](Self::poll_close)), sends each to its node at version 1, and hands every
/// answer or failure back ([`handle_fetch`](Self::handle_fetch),
/// [`handle_ack`](Self::handle_ack)). The module docs hold the rules.
#[derive(Debug)]
pub struct ShareSessions {
    group_id: String,
    member_id: MemberId,
    settings: ShareFetchSettings,
    mode: AckMode,
    /// The assignment: each partition with its leader, if known.
    assignment: BTreeMap<SharePartition, Option<i32>>,
    leaders: BTreeMap<i32, Leader>,
    delivered: Delivered,
    next_token: u64,
    closing: bool,
}

impl ShareSessions {
    /// Sessions of the member `member_id` of the share group `group_id`.
    pub fn new(
        group_id: impl Into<String>,
        member_id: MemberId,
        settings: ShareFetchSettings,
        mode: AckMode,
    ) -> Self {
        Self {
            group_id: group_id.into(),
            member_id,
            settings,
            mode,
            assignment: BTreeMap::new(),
            leaders: BTreeMap::new(),
            delivered: BTreeMap::new(),
            next_token: 0,
            closing: false,
        }
    }

    /// The member id every request carries.
    pub fn member_id(&self) -> &MemberId {
        &self.member_id
    }

    /// What the fetches ask for.
    pub fn settings(&self) -> &ShareFetchSettings {
        &self.settings
    }

    /// The acknowledgement mode.
    pub fn mode(&self) -> AckMode {
        self.mode
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closing(&self) -> bool {
        self.closing
    }

    /// Whether every session is closed (or never opened) and nothing is in flight.
    pub fn is_closed(&self) -> bool {
        self.closing && (self.leaders.values()).all(|l| l.closed && l.in_flight.is_none())
    }

    /// The epoch the next request to `node` carries (0 without an open session), or `None` if
    /// nothing is known of that node.
    pub fn epoch(&self, node: i32) -> Option<i32> {
        self.leaders.get(&node).map(|l| l.epoch)
    }

    /// The earliest instant a leader waiting out a backoff may be sent to again (call
    /// [`poll_fetch`](Self::poll_fetch) then).
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.closing {
            // Nothing waits for a backoff once closing: closes go out as leaders fall idle.
            return None;
        }
        (self.leaders.values())
            .filter(|l| l.in_flight.is_none() && !l.closed)
            .filter_map(|l| l.retry_at)
            .min()
    }

    /// Sets the member's assignment: each partition with its leader's node id (`None` while
    /// not known: the partition waits). Partitions left out are forgotten by their session on
    /// its next request; their delivered records can still be acknowledged. Ignored once
    /// [`close`](Self::close) was called.
    pub fn set_assignment(
        &mut self,
        partitions: impl IntoIterator<Item = (SharePartition, Option<i32>)>,
    ) {
        if self.closing {
            return;
        }
        self.assignment = partitions.into_iter().collect();
        for node in self.assignment.values().flatten() {
            self.leaders.entry(*node).or_default();
        }
    }

    /// Acknowledges the delivered offsets `first..=last` of `partition` as `kind` (explicit
    /// mode): sent on the next request to the leader that delivered them, and reported once in
    /// an outcome.
    pub fn acknowledge(
        &mut self,
        partition: SharePartition,
        first: i64,
        last: i64,
        kind: AcknowledgeType,
    ) -> Result<(), ShareMisuse> {
        if self.closing {
            return Err(ShareMisuse::Closed);
        }
        if self.mode == AckMode::Implicit {
            return Err(ShareMisuse::ImplicitMode);
        }
        let not_delivered = ShareMisuse::NotDelivered {
            partition,
            first,
            last,
        };
        if first > last {
            return Err(not_delivered);
        }
        let from = (partition, i32::MIN);
        let to = (partition, i32::MAX);
        let Some((&key, ranges)) =
            (self.delivered.range_mut(from..=to)).find(|(_, ranges)| covered(ranges, first, last))
        else {
            return Err(not_delivered);
        };
        carve(ranges, first, last);
        if ranges.is_empty() {
            self.delivered.remove(&key);
        }
        let node = key.1;
        (self.leaders.entry(node).or_default().acks).push(PendingAck {
            partition,
            first,
            last,
            kind,
            internal: false,
        });
        Ok(())
    }

    /// The next ShareFetch to send, for a leader with something to do (partitions to fetch or
    /// forget, acknowledgements to send) and no request in flight, past its backoff. One
    /// request per leader at a time; call again until `None`.
    pub fn poll_fetch(&mut self, now: Instant) -> Option<ShareCall<ShareFetchRequest>> {
        if self.closing {
            return None;
        }
        let nodes: Vec<i32> = self.leaders.keys().copied().collect();
        for node in nodes {
            if let Some(call) = self.fetch_for(node, now) {
                return Some(call);
            }
        }
        None
    }

    /// The partitions of the assignment led by `node`.
    fn wanted(&self, node: i32) -> BTreeSet<SharePartition> {
        (self.assignment.iter())
            .filter(|(_, leader)| **leader == Some(node))
            .map(|(p, _)| *p)
            .collect()
    }

    fn fetch_for(&mut self, node: i32, now: Instant) -> Option<ShareCall<ShareFetchRequest>> {
        let wanted = self.wanted(node);
        let leader = self.leaders.get_mut(&node)?;
        if leader.closed || leader.in_flight.is_some() || leader.retry_at.is_some_and(|t| now < t) {
            return None;
        }
        leader.retry_at = None;
        if !leader.open() {
            if wanted.is_empty() {
                // No session to open: acknowledgements have nowhere to go (a first request
                // cannot carry them).
                return None;
            }
            let token = self.next_token;
            self.next_token = self.next_token.wrapping_add(1);
            let topics = fetch_topics(&wanted, &[]);
            let request = self.fetch_request(0, topics, Vec::new());
            let leader = self.leaders.get_mut(&node)?;
            leader.in_flight = Some(InFlight {
                token,
                api: Api::Fetch,
                session_after: wanted,
                acks: Vec::new(),
            });
            return Some(ShareCall {
                node,
                request,
                token: ShareToken(token),
            });
        }
        let added: BTreeSet<SharePartition> = wanted.difference(&leader.session).copied().collect();
        let forgotten: BTreeSet<SharePartition> =
            leader.session.difference(&wanted).copied().collect();
        if wanted.is_empty() && forgotten.is_empty() && leader.acks.is_empty() {
            // An empty session answers at once: nothing to wait for.
            return None;
        }
        let acks = std::mem::take(&mut leader.acks);
        let epoch = leader.epoch;
        let topics = fetch_topics(&added, &acks);
        let forgotten_topics = forgotten_topics(&forgotten);
        let token = self.next_token;
        self.next_token = self.next_token.wrapping_add(1);
        let request = self.fetch_request(epoch, topics, forgotten_topics);
        let leader = self.leaders.get_mut(&node)?;
        leader.in_flight = Some(InFlight {
            token,
            api: Api::Fetch,
            session_after: wanted,
            acks,
        });
        Some(ShareCall {
            node,
            request,
            token: ShareToken(token),
        })
    }

    fn fetch_request(
        &self,
        epoch: i32,
        topics: Vec<fetch_req::FetchTopic>,
        forgotten: Vec<fetch_req::ForgottenTopic>,
    ) -> ShareFetchRequest {
        let s = &self.settings;
        let max_wait = i32::try_from(s.max_wait.as_millis()).unwrap_or(i32::MAX);
        ShareFetchRequest::default()
            .with_group_id(Some(GroupId(StrBytes::from_string(self.group_id.clone()))))
            .with_member_id(Some(self.member_id_bytes()))
            .with_share_session_epoch(epoch)
            .with_max_wait_ms(max_wait)
            .with_min_bytes(s.min_bytes)
            .with_max_bytes(s.max_bytes)
            .with_max_records(s.max_records)
            .with_batch_size(s.batch_size)
            .with_topics(topics)
            .with_forgotten_topics_data(forgotten)
    }

    fn member_id_bytes(&self) -> StrBytes {
        StrBytes::from_string(self.member_id.as_str().to_owned())
    }

    /// Finds the request in flight with `token` of `api`, and takes it.
    fn take_in_flight(
        &mut self,
        token: ShareToken,
        api: Api,
    ) -> Result<(i32, InFlight), ShareMisuse> {
        let (node, leader) = (self.leaders.iter_mut())
            .find(|(_, l)| l.in_flight.as_ref().is_some_and(|f| f.token == token.0))
            .ok_or(ShareMisuse::UnknownToken)?;
        if leader.in_flight.as_ref().is_some_and(|f| f.api != api) {
            return Err(ShareMisuse::WrongApi);
        }
        let f = leader.in_flight.take().ok_or(ShareMisuse::UnknownToken)?;
        Ok((*node, f))
    }

    /// A request to `node` failed as a whole: the session ends on this side. Its
    /// acknowledgements fail with `error`; those still pending fail as
    /// [`AckError::SessionEnded`] and the offsets delivered through it can no longer be
    /// acknowledged: they cannot ride the new session's first request (INVALID_REQUEST), and
    /// what the ended session acquired goes back to the group when the broker drops the session
    /// or the acquisition locks expire. The next request reopens after a backoff (at once after
    /// a first `immediate` failure).
    fn failed(
        &mut self,
        node: i32,
        acks: Vec<PendingAck>,
        error: AckError,
        now: Instant,
        immediate: bool,
        out: &mut ShareOutcome,
    ) {
        let report = |a: PendingAck, e: &AckError| a.outcome(Err(e.clone()));
        out.acknowledgements
            .extend(acks.into_iter().filter_map(|a| report(a, &error)));
        self.delivered.retain(|(_, n), _| *n != node);
        let backoff = self.backoff_after(node);
        let leader = self.leaders.entry(node).or_default();
        let pending = std::mem::take(&mut leader.acks);
        out.acknowledgements
            .extend((pending.into_iter()).filter_map(|a| report(a, &AckError::SessionEnded)));
        leader.reset();
        // A backoff too long for `Instant` waits as long as it can.
        let until = now.checked_add(backoff).unwrap_or(now);
        leader.retry_at = (!immediate || leader.failures > 0).then_some(until);
        leader.failures = leader.failures.saturating_add(1);
    }

    /// `retry_backoff * 2^failures`, at most `retry_backoff_max`.
    fn backoff_after(&self, node: i32) -> Duration {
        let failures = self.leaders.get(&node).map_or(0, |l| l.failures);
        let s = &self.settings;
        let factor = 1u32.checked_shl(failures.min(16)).unwrap_or(u32::MAX);
        s.retry_backoff
            .saturating_mul(factor)
            .min(s.retry_backoff_max.max(s.retry_backoff))
    }

    /// The answer to the ShareFetch `token` (or its failure): records, acknowledgement
    /// outcomes, leader lookups needed, errors. `now` starts the backoff after a failure.
    pub fn handle_fetch(
        &mut self,
        token: ShareToken,
        answer: Result<ShareFetchResponse, TransportError>,
        now: Instant,
    ) -> Result<ShareOutcome, ShareMisuse> {
        let (node, sent) = self.take_in_flight(token, Api::Fetch)?;
        let mut out = ShareOutcome::default();
        let r = match answer {
            Ok(r) => r,
            Err(error) => {
                out.errors.push(ShareFetchError::Transport {
                    node,
                    error: error.clone(),
                });
                self.failed(
                    node,
                    sent.acks,
                    AckError::Transport(error),
                    now,
                    false,
                    &mut out,
                );
                return Ok(out);
            }
        };
        if r.error_code != 0 {
            let error = request_error(node, r.error_code, &r.error_message, &mut out);
            // SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH: reopen at once (the Java
            // handler's initialEpoch), then back off if it happens again;
            // SHARE_SESSION_LIMIT_REACHED and the others: reopen after the backoff.
            let session_lost = [
                ResponseError::ShareSessionNotFound,
                ResponseError::InvalidShareSessionEpoch,
            ]
            .iter()
            .any(|e| e.code() == r.error_code);
            self.failed(node, sent.acks, error, now, session_lost, &mut out);
            return Ok(out);
        }
        if let Some(leader) = self.leaders.get_mut(&node) {
            leader.epoch = next_epoch(leader.epoch);
            leader.session = sent.session_after.clone();
            leader.failures = 0;
            leader.retry_at = None;
        }
        out.acquisition_lock_timeout = u64::try_from(r.acquisition_lock_timeout_ms)
            .ok()
            .map(Duration::from_millis);
        let endpoints: BTreeMap<i32, (String, i32)> = (r.node_endpoints.iter())
            .map(|e| (e.node_id.0, (e.host.to_string(), e.port)))
            .collect();
        let mut acks = sent.acks;
        let mut release = Vec::new();
        let mut seen = BTreeSet::new();
        let errors_before = out.errors.len();
        for topic in &r.responses {
            for p in &topic.partitions {
                let partition = SharePartition::new(topic.topic_id, p.partition_index);
                if !seen.insert(partition) {
                    out.errors.push(ShareFetchError::BadAnswer {
                        node,
                        reason: format!("{partition:?} answered twice"),
                    });
                    continue;
                }
                let ack_code = if p.acknowledge_error_code != 0 {
                    Some((p.acknowledge_error_code, text(&p.acknowledge_error_message)))
                } else if p.error_code != 0 {
                    Some((p.error_code, text(&p.error_message)))
                } else {
                    None
                };
                let (answered, rest): (Vec<_>, Vec<_>) =
                    acks.into_iter().partition(|a| a.partition == partition);
                acks = rest;
                out.acknowledgements
                    .extend(answered.into_iter().filter_map(|a| {
                        a.outcome(match &ack_code {
                            None => Ok(()),
                            Some((code, message)) => Err(AckError::Broker {
                                code: *code,
                                message: message.clone(),
                            }),
                        })
                    }));
                if p.error_code != 0 {
                    self.partition_error(node, partition, p, &endpoints, &mut out);
                    continue;
                }
                self.records(
                    node,
                    partition,
                    p,
                    &sent.session_after,
                    &mut release,
                    &mut out,
                );
            }
        }
        out.acknowledgements.extend(
            acks.into_iter()
                .filter_map(|a| a.outcome(Err(AckError::NotAnswered))),
        );
        // A partition error other than a leader move (authorization, an unknown error) comes
        // back at once on every request: the next request to this leader waits for the backoff,
        // so a caller that fetches whenever it may does not spin.
        let partition_failed = out.errors[errors_before..]
            .iter()
            .any(|e| matches!(e, ShareFetchError::Partition { .. }));
        if partition_failed {
            let delay = self.backoff_after(node);
            if let Some(leader) = self.leaders.get_mut(&node) {
                leader.failures = leader.failures.saturating_add(1);
                leader.retry_at = Some(now + delay);
            }
        }
        if let Some(leader) = self.leaders.get_mut(&node) {
            leader.acks.extend(release);
        }
        Ok(out)
    }

    fn partition_error(
        &mut self,
        node: i32,
        partition: SharePartition,
        p: &kafka_protocol::messages::share_fetch_response::PartitionData,
        endpoints: &BTreeMap<i32, (String, i32)>,
        out: &mut ShareOutcome,
    ) {
        if !leader_moved(p.error_code) {
            out.errors.push(ShareFetchError::Partition {
                partition,
                code: p.error_code,
                message: text(&p.error_message),
            });
            return;
        }
        // The partition waits for its new leader; this session forgets it on its next request.
        if let Some(leader) = self.assignment.get_mut(&partition) {
            if *leader == Some(node) {
                *leader = None;
            }
        }
        let l = &p.current_leader;
        let hint = (l.leader_id >= 0).then(|| LeaderHint {
            node: l.leader_id,
            leader_epoch: l.leader_epoch,
            endpoint: endpoints.get(&l.leader_id).cloned(),
        });
        out.refresh.push(RefreshLeader {
            partition,
            code: p.error_code,
            hint,
        });
    }

    /// Delivers the records of `partition` (answered by `node`), or refuses them.
    fn records(
        &mut self,
        node: i32,
        partition: SharePartition,
        p: &kafka_protocol::messages::share_fetch_response::PartitionData,
        session: &BTreeSet<SharePartition>,
        release: &mut Vec<PendingAck>,
        out: &mut ShareOutcome,
    ) {
        if p.acquired_records.is_empty() {
            return;
        }
        let bad = |reason: String| ShareFetchError::BadAnswer { node, reason };
        if !session.contains(&partition) {
            out.errors.push(bad(format!(
                "records acquired for {partition:?}, not in the session"
            )));
            return;
        }
        let mut acquired = Vec::with_capacity(p.acquired_records.len());
        let mut prev_last: Option<i64> = None;
        for a in &p.acquired_records {
            if a.first_offset > a.last_offset
                || a.first_offset < 0
                || a.delivery_count < 1
                || prev_last.is_some_and(|l| a.first_offset <= l)
            {
                out.errors.push(bad(format!(
                    "{partition:?}: acquired range {}..={} (delivery count {}) is impossible",
                    a.first_offset, a.last_offset, a.delivery_count
                )));
                return;
            }
            prev_last = Some(a.last_offset);
            acquired.push(AcquiredRange {
                first: a.first_offset,
                last: a.last_offset,
                delivery_count: a.delivery_count,
            });
        }
        // Records of a partition the member no longer holds (the assignment changed while the
        // request was out), or arriving while closing, are released for other members, not
        // delivered (the Java consumer releases what it will not hand out).
        if self.closing || !self.assignment.contains_key(&partition) {
            release.extend(acquired.iter().map(|a| PendingAck {
                partition,
                first: a.first,
                last: a.last,
                kind: AcknowledgeType::Release,
                internal: true,
            }));
            return;
        }
        match self.mode {
            // Implicit: everything delivered is ACCEPTed on the next request.
            AckMode::Implicit => release.extend(acquired.iter().map(|a| PendingAck {
                partition,
                first: a.first,
                last: a.last,
                kind: AcknowledgeType::Accept,
                internal: false,
            })),
            AckMode::Explicit => {
                let ranges = self.delivered.entry((partition, node)).or_default();
                for a in &acquired {
                    carve(ranges, a.first, a.last);
                    ranges.insert(a.first, a.last);
                }
            }
        }
        out.records.push(ShareRecords {
            partition,
            records: p.records.clone().unwrap_or_default(),
            acquired,
        });
    }

    /// Closes the sessions: acknowledgements are refused from now on, no more fetches are made,
    /// and each leader with an open session gets a ShareAcknowledge at epoch -1 carrying its
    /// pending acknowledgements (returned here for the idle ones, from
    /// [`poll_close`](Self::poll_close) for those with a request in flight). Acknowledgements
    /// pending for a leader with no open session are reported failed in the returned outcome.
    pub fn close(&mut self) -> (Vec<ShareCall<ShareAcknowledgeRequest>>, ShareOutcome) {
        let mut out = ShareOutcome::default();
        if self.closing {
            return (Vec::new(), out);
        }
        self.closing = true;
        let mut calls = Vec::new();
        while let Some(call) = self.close_next(&mut out) {
            calls.push(call);
        }
        (calls, out)
    }

    /// The close of a leader whose request was in flight when [`close`](Self::close) was
    /// called, once it is answered; `None` before `close` and when none is due. The outcome
    /// holds acknowledgements that could not be sent.
    pub fn poll_close(&mut self) -> (Option<ShareCall<ShareAcknowledgeRequest>>, ShareOutcome) {
        let mut out = ShareOutcome::default();
        if !self.closing {
            return (None, out);
        }
        (self.close_next(&mut out), out)
    }

    fn close_next(&mut self, out: &mut ShareOutcome) -> Option<ShareCall<ShareAcknowledgeRequest>> {
        let token = self.next_token;
        let group = GroupId(StrBytes::from_string(self.group_id.clone()));
        let member = self.member_id_bytes();
        for (node, leader) in &mut self.leaders {
            if leader.closed || leader.in_flight.is_some() {
                continue;
            }
            leader.closed = true;
            let acks = std::mem::take(&mut leader.acks);
            if !leader.open() {
                out.acknowledgements.extend(
                    acks.into_iter()
                        .filter_map(|a| a.outcome(Err(AckError::SessionEnded))),
                );
                continue;
            }
            let request = ShareAcknowledgeRequest::default()
                .with_group_id(Some(group))
                .with_member_id(Some(member))
                .with_share_session_epoch(-1)
                .with_topics(ack_topics(&acks));
            leader.in_flight = Some(InFlight {
                token,
                api: Api::Acknowledge,
                session_after: BTreeSet::new(),
                acks,
            });
            leader.reset();
            self.next_token = self.next_token.wrapping_add(1);
            return Some(ShareCall {
                node: *node,
                request,
                token: ShareToken(token),
            });
        }
        None
    }

    /// The answer to the closing ShareAcknowledge `token` (or its failure): the outcome of its
    /// acknowledgements and the leader lookups needed. The session is over either way.
    pub fn handle_ack(
        &mut self,
        token: ShareToken,
        answer: Result<ShareAcknowledgeResponse, TransportError>,
    ) -> Result<ShareOutcome, ShareMisuse> {
        let (node, sent) = self.take_in_flight(token, Api::Acknowledge)?;
        let mut out = ShareOutcome::default();
        let mut acks = sent.acks;
        let r = match answer {
            Ok(r) => r,
            Err(error) => {
                out.errors.push(ShareFetchError::Transport {
                    node,
                    error: error.clone(),
                });
                let e = AckError::Transport(error);
                out.acknowledgements
                    .extend(acks.into_iter().filter_map(|a| a.outcome(Err(e.clone()))));
                return Ok(out);
            }
        };
        if r.error_code != 0 {
            let e = request_error(node, r.error_code, &r.error_message, &mut out);
            out.acknowledgements
                .extend(acks.into_iter().filter_map(|a| a.outcome(Err(e.clone()))));
            return Ok(out);
        }
        for topic in &r.responses {
            for p in &topic.partitions {
                let partition = SharePartition::new(topic.topic_id, p.partition_index);
                let (answered, rest): (Vec<_>, Vec<_>) =
                    acks.into_iter().partition(|a| a.partition == partition);
                acks = rest;
                let result = match p.error_code {
                    0 => Ok(()),
                    code => Err(AckError::Broker {
                        code,
                        message: text(&p.error_message),
                    }),
                };
                out.acknowledgements.extend(
                    answered
                        .into_iter()
                        .filter_map(|a| a.outcome(result.clone())),
                );
                if leader_moved(p.error_code) {
                    let l = &p.current_leader;
                    let hint = (l.leader_id >= 0).then(|| LeaderHint {
                        node: l.leader_id,
                        leader_epoch: l.leader_epoch,
                        endpoint: (r.node_endpoints.iter())
                            .find(|e| e.node_id.0 == l.leader_id)
                            .map(|e| (e.host.to_string(), e.port)),
                    });
                    out.refresh.push(RefreshLeader {
                        partition,
                        code: p.error_code,
                        hint,
                    });
                }
            }
        }
        out.acknowledgements.extend(
            acks.into_iter()
                .filter_map(|a| a.outcome(Err(AckError::NotAnswered))),
        );
        Ok(out)
    }
}

/// Whether `first..=last` is made of offsets in `ranges`.
fn covered(ranges: &BTreeMap<i64, i64>, first: i64, last: i64) -> bool {
    let mut at = first;
    loop {
        let Some((_, &end)) = ranges.range(..=at).next_back() else {
            return false;
        };
        if end < at {
            return false;
        }
        if end >= last {
            return true;
        }
        at = end + 1;
    }
}

/// Removes `first..=last` from `ranges`, splitting the ranges it cuts.
fn carve(ranges: &mut BTreeMap<i64, i64>, first: i64, last: i64) {
    let starts: Vec<i64> = (ranges.range(..=last))
        .filter(|(_, end)| **end >= first)
        .map(|(start, _)| *start)
        .collect();
    for start in starts {
        let Some(end) = ranges.remove(&start) else {
            continue;
        };
        if start < first {
            ranges.insert(start, first - 1);
        }
        if end > last {
            ranges.insert(last + 1, end);
        }
    }
}

/// A request-level error `code` from `node`: reported, and returned as the failure of the
/// request's acknowledgements.
fn request_error(
    node: i32,
    code: i16,
    message: &Option<StrBytes>,
    out: &mut ShareOutcome,
) -> AckError {
    let message = text(message);
    out.errors.push(ShareFetchError::Request {
        node,
        code,
        message: message.clone(),
    });
    AckError::Broker { code, message }
}

/// The Topics of a request of module `$m` (ShareFetch's or ShareAcknowledge's, whose
/// partition and topic types are `$partition` and `$topic`): the partitions of `acks` with their
/// batches, and `partitions` (added to the session) with none.
macro_rules! share_topics {
    ($m:ident, $partition:ident, $topic:ident, $partitions:expr, $acks:expr) => {{
        let mut by = batches($acks, |a| {
            $m::AcknowledgementBatch::default()
                .with_first_offset(a.first)
                .with_last_offset(a.last)
                .with_acknowledge_types(vec![a.kind.code()])
        });
        for p in $partitions {
            by.entry(*p).or_default();
        }
        let partitions = by.into_iter().map(|(p, batches)| {
            let partition = $m::$partition::default()
                .with_partition_index(p.partition)
                .with_acknowledgement_batches(batches);
            (p, partition)
        });
        by_topic(partitions, |id, ps| {
            $m::$topic::default().with_topic_id(id).with_partitions(ps)
        })
    }};
}

/// The Topics of a ShareFetch: `partitions` (added to the session) and the partitions of `acks`
/// with their batches.
fn fetch_topics(
    partitions: &BTreeSet<SharePartition>,
    acks: &[PendingAck],
) -> Vec<fetch_req::FetchTopic> {
    share_topics!(fetch_req, FetchPartition, FetchTopic, partitions, acks)
}

/// The ForgottenTopicsData of a ShareFetch.
fn forgotten_topics(partitions: &BTreeSet<SharePartition>) -> Vec<fetch_req::ForgottenTopic> {
    by_topic(partitions.iter().map(|p| (*p, p.partition)), |id, ps| {
        fetch_req::ForgottenTopic::default()
            .with_topic_id(id)
            .with_partitions(ps)
    })
}

/// The Topics of a ShareAcknowledge: the partitions of `acks` with their batches.
fn ack_topics(acks: &[PendingAck]) -> Vec<ack_req::AcknowledgeTopic> {
    let none: [&SharePartition; 0] = [];
    share_topics!(ack_req, AcknowledgePartition, AcknowledgeTopic, none, acks)
}

/// `acks` as batches (one acknowledge type per batch), by partition.
fn batches<B>(
    acks: &[PendingAck],
    batch: impl Fn(&PendingAck) -> B,
) -> BTreeMap<SharePartition, Vec<B>> {
    let mut by: BTreeMap<SharePartition, Vec<B>> = BTreeMap::new();
    for a in acks {
        by.entry(a.partition).or_default().push(batch(a));
    }
    by
}

/// `partitions` (in partition order) grouped into one topic each per topic id, built by
/// `topic`.
fn by_topic<P, T>(
    partitions: impl IntoIterator<Item = (SharePartition, P)>,
    topic: impl Fn(Uuid, Vec<P>) -> T,
) -> Vec<T> {
    let mut grouped: Vec<(Uuid, Vec<P>)> = Vec::new();
    for (p, item) in partitions {
        match grouped.last_mut() {
            Some((id, items)) if *id == p.topic_id => items.push(item),
            _ => grouped.push((p.topic_id, vec![item])),
        }
    }
    grouped.into_iter().map(|(id, ps)| topic(id, ps)).collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kafka_protocol::ResponseError;
    use kafka_protocol::messages::share_acknowledge_response as sa;
    use kafka_protocol::messages::share_fetch_response as sf;
    use kafka_protocol::messages::{
        BrokerId, ShareAcknowledgeResponse, ShareFetchRequest, ShareFetchResponse,
    };
    use uuid::Uuid;

    use super::*;
    use crate::machine::test_support::{ID, s};
    use crate::testutil::epoch;

    const T: Uuid = Uuid::from_u128(0x7007);

    fn p(i: i32) -> SharePartition {
        SharePartition::new(T, i)
    }

    fn sessions(mode: AckMode) -> ShareSessions {
        ShareSessions::new(
            "g",
            MemberId::parse(ID).unwrap(),
            ShareFetchSettings::default(),
            mode,
        )
    }

    fn code(e: ResponseError) -> i16 {
        e.code()
    }

    /// A partition's answer with `acquired` ranges (delivery count 1) and some record bytes.
    fn data(i: i32, acquired: &[(i64, i64)]) -> sf::PartitionData {
        sf::PartitionData::default()
            .with_partition_index(i)
            .with_records((!acquired.is_empty()).then(|| Bytes::from_static(b"batch")))
            .with_acquired_records(
                (acquired.iter())
                    .map(|(f, l)| {
                        sf::AcquiredRecords::default()
                            .with_first_offset(*f)
                            .with_last_offset(*l)
                            .with_delivery_count(1)
                    })
                    .collect(),
            )
    }

    fn answer(partitions: Vec<sf::PartitionData>) -> ShareFetchResponse {
        let mut r = ShareFetchResponse::default().with_acquisition_lock_timeout_ms(30_000);
        if !partitions.is_empty() {
            r.responses = vec![
                sf::ShareFetchableTopicResponse::default()
                    .with_topic_id(T)
                    .with_partitions(partitions),
            ];
        }
        r
    }

    fn refused(code: i16) -> ShareFetchResponse {
        ShareFetchResponse::default().with_error_code(code)
    }

    /// The partitions of a request's Topics with their (first, last, types) batches.
    /// Acknowledgement batches as (first, last, types).
    type Batches = Vec<(i64, i64, Vec<i8>)>;

    fn topics(r: &ShareFetchRequest) -> Vec<(i32, Batches)> {
        (r.topics.iter())
            .flat_map(|t| {
                assert_eq!(t.topic_id, T);
                t.partitions.iter().map(|p| {
                    let batches = (p.acknowledgement_batches.iter())
                        .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()))
                        .collect();
                    (p.partition_index, batches)
                })
            })
            .collect()
    }

    fn partitions(r: &ShareFetchRequest) -> Vec<i32> {
        topics(r).into_iter().map(|(p, _)| p).collect()
    }

    fn forgotten(r: &ShareFetchRequest) -> Vec<i32> {
        (r.forgotten_topics_data.iter())
            .flat_map(|t| t.partitions.clone())
            .collect()
    }

    fn assert_identity(r: &ShareFetchRequest) {
        assert_eq!(r.member_id.as_deref(), Some(ID));
        assert_eq!(r.group_id.as_ref().map(|g| &*g.0), Some("g"));
    }

    /// Sessions with p0, p1 on node 1, opened (epoch 1 next).
    fn opened(mode: AckMode) -> ShareSessions {
        let now = epoch();
        let mut m = sessions(mode);
        m.set_assignment([(p(0), Some(1)), (p(1), Some(1))]);
        let call = m.poll_fetch(now).unwrap();
        assert_eq!(call.request.share_session_epoch, 0);
        assert_eq!(partitions(&call.request), vec![0, 1]);
        m.handle_fetch(call.token, Ok(answer(vec![])), now).unwrap();
        assert_eq!(m.epoch(1), Some(1));
        m
    }

    /// Opened sessions that delivered 0..=9 of p0.
    fn delivered(mode: AckMode) -> ShareSessions {
        let now = epoch();
        let mut m = opened(mode);
        let call = m.poll_fetch(now).unwrap();
        let out = m
            .handle_fetch(call.token, Ok(answer(vec![data(0, &[(0, 9)])])), now)
            .unwrap();
        assert_eq!(out.records.len(), 1, "{out:?}");
        assert_eq!(
            out.records[0].acquired,
            vec![AcquiredRange {
                first: 0,
                last: 9,
                delivery_count: 1
            }]
        );
        assert_eq!(out.acquisition_lock_timeout, Some(Duration::from_secs(30)));
        m
    }

    #[test]
    fn epochs_count_up_per_leader_one_request_in_flight_each() {
        let now = epoch();
        let mut m = sessions(AckMode::Explicit);
        m.set_assignment([(p(0), Some(1)), (p(1), Some(2)), (p(2), None)]);
        let a = m.poll_fetch(now).unwrap();
        let b = m.poll_fetch(now).unwrap();
        assert!(
            m.poll_fetch(now).is_none(),
            "one request in flight per leader"
        );
        assert_eq!((a.node, partitions(&a.request)), (1, vec![0]));
        assert_eq!((b.node, partitions(&b.request)), (2, vec![1]));
        let mut seen = vec![];
        let mut call = a;
        for _ in 0..4 {
            assert_identity(&call.request);
            seen.push(call.request.share_session_epoch);
            m.handle_fetch(call.token, Ok(answer(vec![])), now).unwrap();
            call = m.poll_fetch(now).unwrap();
            assert_eq!(call.node, 1);
            assert!(call.request.topics.is_empty(), "incremental: nothing new");
        }
        assert_eq!(seen, vec![0, 1, 2, 3]);
        assert_eq!(m.epoch(2), Some(0), "node 2 unanswered: still opening");
        assert_eq!(next_epoch(i32::MAX), 1);
        assert_eq!(next_epoch(0), 1);
    }

    #[test]
    fn session_errors_reopen_at_epoch_zero_with_every_partition() {
        for error in [
            ResponseError::InvalidShareSessionEpoch,
            ResponseError::ShareSessionNotFound,
        ] {
            let now = epoch();
            let mut m = delivered(AckMode::Explicit);
            m.acknowledge(p(0), 0, 4, AcknowledgeType::Accept).unwrap();
            let call = m.poll_fetch(now).unwrap();
            assert_eq!(call.request.share_session_epoch, 2);
            // Acknowledged while the request is out: pending when the session ends.
            m.acknowledge(p(0), 5, 9, AcknowledgeType::Release).unwrap();
            let out = m
                .handle_fetch(call.token, Ok(refused(code(error))), now)
                .unwrap();
            let results: Vec<_> = (out.acknowledgements.iter())
                .map(|a| (a.first, a.result.clone()))
                .collect();
            assert_eq!(
                results,
                vec![
                    (
                        0,
                        Err(AckError::Broker {
                            code: code(error),
                            message: None
                        })
                    ),
                    (5, Err(AckError::SessionEnded)),
                ]
            );
            let again = m.poll_fetch(now).expect("reopened at once");
            assert_eq!(again.request.share_session_epoch, 0);
            assert_eq!(partitions(&again.request), vec![0, 1]);
            assert!(topics(&again.request).iter().all(|(_, b)| b.is_empty()));
            assert!(again.request.forgotten_topics_data.is_empty());
            // A second failure in a row waits for the backoff (doubled: the second failure).
            m.handle_fetch(again.token, Ok(refused(code(error))), now)
                .unwrap();
            assert!(m.poll_fetch(now).is_none());
            let at = m.next_deadline().unwrap();
            assert_eq!(at, now + Duration::from_millis(200));
            assert_eq!(m.poll_fetch(at).unwrap().request.share_session_epoch, 0);
        }
    }

    #[test]
    fn limit_reached_backs_off_then_reopens() {
        let now = epoch();
        let mut m = sessions(AckMode::Explicit);
        m.set_assignment([(p(0), Some(1))]);
        let call = m.poll_fetch(now).unwrap();
        let out = m
            .handle_fetch(
                call.token,
                Ok(refused(code(ResponseError::ShareSessionLimitReached))),
                now,
            )
            .unwrap();
        assert!(matches!(
            out.errors[..],
            [ShareFetchError::Request { node: 1, .. }]
        ));
        assert!(m.poll_fetch(now).is_none());
        assert_eq!(m.next_deadline(), Some(now + Duration::from_millis(100)));
        let call = m.poll_fetch(now + Duration::from_millis(100)).unwrap();
        assert_eq!(call.request.share_session_epoch, 0);
    }

    #[test]
    fn removed_partitions_are_forgotten_once_and_added_ones_listed_once() {
        let now = epoch();
        let mut m = opened(AckMode::Explicit);
        m.set_assignment([(p(0), Some(1)), (p(2), Some(1))]);
        let call = m.poll_fetch(now).unwrap();
        assert_eq!(call.request.share_session_epoch, 1);
        assert_eq!(partitions(&call.request), vec![2]);
        assert_eq!(forgotten(&call.request), vec![1]);
        m.handle_fetch(call.token, Ok(answer(vec![])), now).unwrap();
        let call = m.poll_fetch(now).unwrap();
        assert!(call.request.topics.is_empty() && call.request.forgotten_topics_data.is_empty());
        // Nothing assigned any more: one request forgets everything, then none is needed.
        m.handle_fetch(call.token, Ok(answer(vec![])), now).unwrap();
        m.set_assignment([]);
        let call = m.poll_fetch(now).unwrap();
        assert_eq!(forgotten(&call.request), vec![0, 2]);
        m.handle_fetch(call.token, Ok(answer(vec![])), now).unwrap();
        assert!(m.poll_fetch(now).is_none());
    }

    #[test]
    fn acknowledgements_go_once_and_are_reported_once() {
        let now = epoch();
        let mut m = delivered(AckMode::Explicit);
        m.acknowledge(p(0), 0, 4, AcknowledgeType::Accept).unwrap();
        m.acknowledge(p(0), 5, 5, AcknowledgeType::Gap).unwrap();
        m.acknowledge(p(0), 6, 9, AcknowledgeType::Release).unwrap();
        for (first, last) in [(0, 4), (3, 3), (9, 10), (11, 11), (5, 4)] {
            assert!(matches!(
                m.acknowledge(p(0), first, last, AcknowledgeType::Accept),
                Err(ShareMisuse::NotDelivered { .. })
            ));
        }
        let call = m.poll_fetch(now).unwrap();
        assert_eq!(
            topics(&call.request),
            vec![(0, vec![(0, 4, vec![1]), (5, 5, vec![0]), (6, 9, vec![2])])]
        );
        let out = m
            .handle_fetch(call.token, Ok(answer(vec![data(0, &[])])), now)
            .unwrap();
        let kinds: Vec<_> = (out.acknowledgements.iter())
            .map(|a| (a.first, a.last, a.kind, a.result.clone()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (0, 4, AcknowledgeType::Accept, Ok(())),
                (5, 5, AcknowledgeType::Gap, Ok(())),
                (6, 9, AcknowledgeType::Release, Ok(())),
            ]
        );
        let call = m.poll_fetch(now).unwrap();
        assert!(call.request.topics.is_empty(), "sent once");
        let out = m.handle_fetch(call.token, Ok(answer(vec![])), now).unwrap();
        assert!(out.acknowledgements.is_empty(), "reported once");
    }

    #[test]
    fn acknowledgement_errors_and_silence_are_failures() {
        let now = epoch();
        let mut m = opened(AckMode::Explicit);
        let call = m.poll_fetch(now).unwrap();
        let both = vec![data(0, &[(0, 9)]), data(1, &[(0, 9)])];
        m.handle_fetch(call.token, Ok(answer(both)), now).unwrap();
        m.acknowledge(p(0), 0, 9, AcknowledgeType::Accept).unwrap();
        m.acknowledge(p(1), 0, 9, AcknowledgeType::Accept).unwrap();
        let call = m.poll_fetch(now).unwrap();
        let invalid = code(ResponseError::InvalidRecordState);
        let p0 = data(0, &[])
            .with_acknowledge_error_code(invalid)
            .with_acknowledge_error_message(Some(s("no")));
        // p1 is not answered at all.
        let out = m
            .handle_fetch(call.token, Ok(answer(vec![p0])), now)
            .unwrap();
        let results: Vec<_> = (out.acknowledgements.iter())
            .map(|a| (a.partition.partition, a.result.clone()))
            .collect();
        assert_eq!(
            results,
            vec![
                (
                    0,
                    Err(AckError::Broker {
                        code: invalid,
                        message: Some("no".into())
                    })
                ),
                (1, Err(AckError::NotAnswered)),
            ]
        );
    }

    #[test]
    fn a_transport_failure_fails_its_acknowledgements_and_reopens() {
        let now = epoch();
        let mut m = delivered(AckMode::Explicit);
        m.acknowledge(p(0), 0, 9, AcknowledgeType::Accept).unwrap();
        let call = m.poll_fetch(now).unwrap();
        let out = m
            .handle_fetch(call.token, Err(TransportError::Closed), now)
            .unwrap();
        assert_eq!(out.acknowledgements.len(), 1);
        assert_eq!(
            out.acknowledgements[0].result,
            Err(AckError::Transport(TransportError::Closed))
        );
        assert!(matches!(
            out.errors[..],
            [ShareFetchError::Transport { node: 1, .. }]
        ));
        assert!(m.poll_fetch(now).is_none(), "backoff");
        let call = m.poll_fetch(now + Duration::from_secs(1)).unwrap();
        assert_eq!(call.request.share_session_epoch, 0);
        assert_eq!(partitions(&call.request), vec![0, 1]);
        assert!(
            m.handle_fetch(call.token, Err(TransportError::Closed), now)
                .unwrap()
                .acknowledgements
                .is_empty()
        );
    }

    /// A partition error that is not a leader move comes back at once on every request: the
    /// next request to that leader waits for the backoff (no busy loop), and a clean answer
    /// resets the pacing.
    #[test]
    fn a_partition_error_paces_the_next_request() {
        let now = epoch();
        let mut m = opened(AckMode::Explicit);
        let call = m.poll_fetch(now).unwrap();
        let denied = data(0, &[]).with_error_code(code(ResponseError::TopicAuthorizationFailed));
        let out = m
            .handle_fetch(call.token, Ok(answer(vec![denied, data(1, &[])])), now)
            .unwrap();
        assert!(
            out.errors
                .iter()
                .any(|e| matches!(e, ShareFetchError::Partition { .. })),
            "{out:?}"
        );
        assert!(m.poll_fetch(now).is_none(), "no request before the backoff");
        let later = m.next_deadline().expect("a backoff deadline");
        assert!(later > now);
        let call = m
            .poll_fetch(later)
            .expect("fetches again after the backoff");
        m.handle_fetch(call.token, Ok(answer(vec![])), later)
            .unwrap();
        assert!(
            m.poll_fetch(later).is_some(),
            "a clean answer ends the pacing"
        );
    }

    #[test]
    fn a_moved_leader_is_looked_up_and_its_partition_forgotten() {
        let now = epoch();
        let mut m = delivered(AckMode::Explicit);
        m.acknowledge(p(0), 0, 9, AcknowledgeType::Accept).unwrap();
        let call = m.poll_fetch(now).unwrap();
        let moved = code(ResponseError::NotLeaderOrFollower);
        let p0 = data(0, &[]).with_error_code(moved).with_current_leader(
            sf::LeaderIdAndEpoch::default()
                .with_leader_id(2)
                .with_leader_epoch(7),
        );
        let mut r = answer(vec![p0, data(1, &[])]);
        r.node_endpoints = vec![
            sf::NodeEndpoint::default()
                .with_node_id(BrokerId(2))
                .with_host(s("b2"))
                .with_port(9092),
        ];
        let out = m.handle_fetch(call.token, Ok(r), now).unwrap();
        assert_eq!(
            out.refresh,
            vec![RefreshLeader {
                partition: p(0),
                code: moved,
                hint: Some(LeaderHint {
                    node: 2,
                    leader_epoch: 7,
                    endpoint: Some(("b2".into(), 9092)),
                }),
            }]
        );
        assert!(matches!(
            out.acknowledgements[0].result,
            Err(AckError::Broker { code, .. }) if code == moved
        ));
        let call = m.poll_fetch(now).unwrap();
        assert_eq!((call.node, forgotten(&call.request)), (1, vec![0]));
        m.set_assignment([(p(0), Some(2)), (p(1), Some(1))]);
        let call2 = m.poll_fetch(now).unwrap();
        assert_eq!(call2.node, 2);
        assert_eq!(call2.request.share_session_epoch, 0);
        assert_eq!(partitions(&call2.request), vec![0]);
    }

    #[test]
    fn implicit_mode_accepts_what_it_delivered_on_the_next_fetch() {
        let now = epoch();
        let mut m = delivered(AckMode::Implicit);
        assert_eq!(
            m.acknowledge(p(0), 0, 9, AcknowledgeType::Accept),
            Err(ShareMisuse::ImplicitMode)
        );
        let call = m.poll_fetch(now).unwrap();
        assert_eq!(topics(&call.request), vec![(0, vec![(0, 9, vec![1])])]);
        let out = m
            .handle_fetch(call.token, Ok(answer(vec![data(0, &[])])), now)
            .unwrap();
        assert_eq!(out.acknowledgements.len(), 1);
        assert_eq!(out.acknowledgements[0].result, Ok(()));
    }

    #[test]
    fn records_of_a_partition_no_longer_assigned_are_released() {
        let now = epoch();
        let mut m = opened(AckMode::Explicit);
        let call = m.poll_fetch(now).unwrap();
        m.set_assignment([(p(0), Some(1))]);
        let out = m
            .handle_fetch(call.token, Ok(answer(vec![data(1, &[(3, 4)])])), now)
            .unwrap();
        assert!(out.records.is_empty());
        let call = m.poll_fetch(now).unwrap();
        assert_eq!(topics(&call.request), vec![(1, vec![(3, 4, vec![2])])]);
        assert_eq!(forgotten(&call.request), vec![1]);
        let out = m
            .handle_fetch(call.token, Ok(answer(vec![data(1, &[])])), now)
            .unwrap();
        assert!(
            out.acknowledgements.is_empty(),
            "internal releases are not reported"
        );
    }

    #[test]
    fn impossible_answers_are_refused() {
        let now = epoch();
        let mut m = opened(AckMode::Explicit);
        for bad in [
            vec![data(0, &[(9, 0)])],
            vec![data(0, &[(0, 5), (5, 9)])],
            vec![data(0, &[(-3, 0)])],
            vec![data(7, &[(0, 0)])],
            vec![data(0, &[(0, 0)]).with_acquired_records(vec![
                sf::AcquiredRecords::default().with_delivery_count(0),
            ])],
        ] {
            let call = m.poll_fetch(now).unwrap();
            let out = m.handle_fetch(call.token, Ok(answer(bad)), now).unwrap();
            assert!(out.records.is_empty(), "{out:?}");
            assert!(
                matches!(out.errors[..], [ShareFetchError::BadAnswer { node: 1, .. }]),
                "{out:?}"
            );
        }
        assert!(matches!(
            m.acknowledge(p(0), 0, 0, AcknowledgeType::Accept),
            Err(ShareMisuse::NotDelivered { .. })
        ));
    }

    #[test]
    fn tokens_are_answered_once_and_by_their_own_api() {
        let now = epoch();
        let mut m = opened(AckMode::Explicit);
        let call = m.poll_fetch(now).unwrap();
        assert_eq!(
            m.handle_ack(call.token, Ok(ShareAcknowledgeResponse::default())),
            Err(ShareMisuse::WrongApi)
        );
        m.handle_fetch(call.token, Ok(answer(vec![])), now).unwrap();
        assert_eq!(
            m.handle_fetch(call.token, Ok(answer(vec![])), now),
            Err(ShareMisuse::UnknownToken)
        );
    }

    #[test]
    fn close_ends_each_open_session_with_epoch_minus_one_and_nothing_after() {
        let now = epoch();
        let mut m = delivered(AckMode::Explicit);
        m.set_assignment([
            (p(0), Some(1)),
            (p(1), Some(1)),
            (p(2), Some(2)),
            (p(3), Some(3)),
        ]);
        // Node 1 open and idle; node 2 with its first fetch in flight; node 3 never opened.
        m.acknowledge(p(0), 0, 9, AcknowledgeType::Accept).unwrap();
        let first = m.poll_fetch(now).unwrap();
        let to2 = m.poll_fetch(now).unwrap();
        let to3 = m.poll_fetch(now).unwrap();
        assert_eq!((first.node, to2.node, to3.node), (1, 2, 3));
        let out = m
            .handle_fetch(first.token, Ok(answer(vec![data(0, &[])])), now)
            .unwrap();
        assert_eq!(out.acknowledgements[0].result, Ok(()));
        m.acknowledge(p(0), 0, 0, AcknowledgeType::Accept)
            .unwrap_err();
        m.handle_fetch(to3.token, Err(TransportError::Closed), now)
            .unwrap();

        let (calls, out) = m.close();
        assert!(out.acknowledgements.is_empty());
        assert_eq!(
            calls.len(),
            1,
            "node 1 only: node 2 is busy, node 3 has no session"
        );
        let c = &calls[0];
        assert_eq!(c.node, 1);
        assert_eq!(c.request.share_session_epoch, -1);
        assert_eq!(c.request.member_id.as_deref(), Some(ID));
        assert!(
            c.request.topics.is_empty(),
            "the acknowledgement went with the fetch"
        );
        assert!(m.poll_fetch(now).is_none());
        assert_eq!(
            m.acknowledge(p(2), 0, 0, AcknowledgeType::Accept),
            Err(ShareMisuse::Closed)
        );
        assert!(m.poll_close().0.is_none(), "node 2 still busy");
        // Node 2's session opens with records: they are released by its close, not delivered.
        let out = m
            .handle_fetch(to2.token, Ok(answer(vec![data(2, &[(0, 1)])])), now)
            .unwrap();
        assert!(out.records.is_empty());
        let (close2, _) = m.poll_close();
        let close2 = close2.unwrap();
        assert_eq!(close2.node, 2);
        assert_eq!(close2.request.share_session_epoch, -1);
        let acks: Vec<_> = (close2.request.topics.iter())
            .flat_map(|t| t.partitions.iter())
            .flat_map(|p| p.acknowledgement_batches.iter())
            .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()))
            .collect();
        assert_eq!(acks, vec![(0, 1, vec![2])]);
        assert!(!m.is_closed());
        m.handle_ack(c.token, Ok(ShareAcknowledgeResponse::default()))
            .unwrap();
        let out = m
            .handle_ack(
                close2.token,
                Ok(ShareAcknowledgeResponse::default().with_responses(vec![
                    sa::ShareAcknowledgeTopicResponse::default()
                        .with_topic_id(T)
                        .with_partitions(vec![
                            sa::PartitionData::default().with_partition_index(2),
                        ]),
                ])),
            )
            .unwrap();
        assert!(out.acknowledgements.is_empty());
        assert!(m.is_closed());
        assert!(m.poll_close().0.is_none());
        assert!(m.poll_fetch(now + Duration::from_secs(60)).is_none());
        assert!(m.close().0.is_empty());
    }

    #[test]
    fn close_carries_pending_acknowledgements_and_reports_them() {
        let mut m = delivered(AckMode::Explicit);
        m.acknowledge(p(0), 0, 4, AcknowledgeType::Accept).unwrap();
        m.acknowledge(p(0), 5, 9, AcknowledgeType::Reject).unwrap();
        let (calls, _) = m.close();
        let c = &calls[0];
        let batches: Vec<_> = (c.request.topics.iter())
            .flat_map(|t| t.partitions.iter())
            .flat_map(|p| p.acknowledgement_batches.iter())
            .map(|b| (b.first_offset, b.acknowledge_types.clone()))
            .collect();
        assert_eq!(batches, vec![(0, vec![1]), (5, vec![3])]);
        let invalid = code(ResponseError::InvalidRecordState);
        let out = m
            .handle_ack(
                c.token,
                Ok(ShareAcknowledgeResponse::default().with_responses(vec![
                    sa::ShareAcknowledgeTopicResponse::default()
                        .with_topic_id(T)
                        .with_partitions(vec![
                            sa::PartitionData::default()
                                .with_partition_index(0)
                                .with_error_code(invalid),
                        ]),
                ])),
            )
            .unwrap();
        assert_eq!(out.acknowledgements.len(), 2);
        assert!(out.acknowledgements.iter().all(|a| matches!(
            a.result,
            Err(AckError::Broker { code, .. }) if code == invalid
        )));
        assert!(m.is_closed());
    }

    /// Random assignments, fetches, answers (records, acknowledgement errors, leader moves,
    /// session errors, transport failures, silence), acknowledgements and a close, per seed.
    /// Every acknowledgement accepted is reported exactly once, as a success only when the
    /// partition was answered without error; the epochs follow 0, 1, 2, ... per leader and reset
    /// to 0 after a failure; no acknowledgement rides an epoch 0 request; the member id is in
    /// every request; after close only epoch -1 requests go out.
    #[test]
    fn random_runs_keep_the_session_rules() {
        use rand::{Rng, SeedableRng};
        // Acknowledgements reported ok and failed, over all seeds.
        let reported = std::cell::Cell::new((0usize, 0usize));
        for seed in 0..300u64 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let mut now = epoch();
            let mode = if seed % 4 == 0 {
                AckMode::Implicit
            } else {
                AckMode::Explicit
            };
            let mut m = sessions(mode);
            // Per node: the epoch its next request must carry.
            let mut expected: BTreeMap<i32, i32> = BTreeMap::new();
            let mut fetches: Vec<ShareCall<ShareFetchRequest>> = Vec::new();
            // Acknowledgements made and not reported yet.
            let mut outstanding: Vec<(SharePartition, i64, i64)> = Vec::new();
            // Per token: the partitions answered without error.
            let mut clean: BTreeMap<u64, BTreeSet<SharePartition>> = BTreeMap::new();
            let mut delivered_ranges: Vec<(SharePartition, i64, i64)> = Vec::new();
            let mut offset = 0i64;
            let report =
                |out: &ShareOutcome,
                 clean: &BTreeMap<u64, BTreeSet<SharePartition>>,
                 token: u64,
                 outstanding: &mut Vec<(SharePartition, i64, i64)>| {
                    for a in &out.acknowledgements {
                        let key = (a.partition, a.first, a.last);
                        let at = outstanding.iter().position(|k| *k == key);
                        assert!(
                            at.is_some(),
                            "seed {seed}: {a:?} reported but not outstanding"
                        );
                        if let Some(at) = at {
                            outstanding.swap_remove(at);
                        }
                        let (ok, failed) = reported.get();
                        let good = a.result.is_ok();
                        reported.set((ok + usize::from(good), failed + usize::from(!good)));
                        if a.result.is_ok() {
                            assert!(
                                clean.get(&token).is_some_and(|c| c.contains(&a.partition)),
                                "seed {seed}: {a:?} reported ok without a clean answer"
                            );
                        }
                    }
                };
            for _ in 0..80 {
                now += Duration::from_millis(rng.random_range(0..300));
                match rng.random_range(0..10) {
                    0 => {
                        let mut assignment = Vec::new();
                        for i in 0..4 {
                            let leader = rng.random_range(0..4);
                            if rng.random_bool(0.7) {
                                assignment.push((p(i), (leader > 0).then_some(leader)));
                            }
                        }
                        m.set_assignment(assignment);
                    }
                    1..=3 => {
                        while let Some(call) = m.poll_fetch(now) {
                            let r = &call.request;
                            assert_identity(r);
                            let want = expected.get(&call.node).copied().unwrap_or(0);
                            assert_eq!(r.share_session_epoch, want, "seed {seed}");
                            if want == 0 {
                                assert!(topics(r).iter().all(|(_, b)| b.is_empty()));
                                assert!(r.forgotten_topics_data.is_empty());
                            }
                            fetches.push(call);
                        }
                    }
                    4..=6 if !fetches.is_empty() => {
                        let call = fetches.swap_remove(rng.random_range(0..fetches.len()));
                        let token = call.token.0;
                        let answer = match rng.random_range(0..10) {
                            0 => Err(TransportError::Closed),
                            1 => Ok(refused(code(ResponseError::InvalidShareSessionEpoch))),
                            2 => Ok(refused(code(ResponseError::ShareSessionNotFound))),
                            _ => {
                                let mut parts = Vec::new();
                                let mut ok = BTreeSet::new();
                                for i in 0..4 {
                                    if rng.random_bool(0.2) {
                                        continue;
                                    }
                                    let mut d = data(i, &[]);
                                    match rng.random_range(0..8) {
                                        0 => {
                                            d.acknowledge_error_code =
                                                code(ResponseError::InvalidRecordState)
                                        }
                                        1 => {
                                            d.error_code = code(ResponseError::NotLeaderOrFollower)
                                        }
                                        _ => {
                                            ok.insert(p(i));
                                            if rng.random_bool(0.5) {
                                                let n = rng.random_range(0..3);
                                                d = data(i, &[(offset, offset + n)]);
                                                offset += n + 1;
                                            }
                                        }
                                    }
                                    parts.push(d);
                                }
                                clean.insert(token, ok);
                                Ok(answer(parts))
                            }
                        };
                        let good = matches!(&answer, Ok(r) if r.error_code == 0);
                        let out = m.handle_fetch(call.token, answer, now).unwrap();
                        let next = if good {
                            next_epoch(expected.get(&call.node).copied().unwrap_or(0))
                        } else {
                            0
                        };
                        expected.insert(call.node, next);
                        for r in &out.records {
                            for a in &r.acquired {
                                delivered_ranges.push((r.partition, a.first, a.last));
                            }
                        }
                        if mode == AckMode::Implicit {
                            for r in &out.records {
                                for a in &r.acquired {
                                    outstanding.push((r.partition, a.first, a.last));
                                }
                            }
                        }
                        report(&out, &clean, token, &mut outstanding);
                    }
                    _ if !delivered_ranges.is_empty() => {
                        let at = rng.random_range(0..delivered_ranges.len());
                        let (part, first, last) = delivered_ranges.swap_remove(at);
                        let kind = [
                            AcknowledgeType::Accept,
                            AcknowledgeType::Release,
                            AcknowledgeType::Reject,
                            AcknowledgeType::Gap,
                        ][rng.random_range(0..4)];
                        if m.acknowledge(part, first, last, kind).is_ok() {
                            outstanding.push((part, first, last));
                        }
                    }
                    _ => {}
                }
            }
            let (calls, out) = m.close();
            report(&out, &clean, u64::MAX, &mut outstanding);
            let mut closes = calls;
            assert!(m.poll_fetch(now + Duration::from_secs(3600)).is_none());
            for call in fetches.drain(..) {
                let out = m.handle_fetch(call.token, Ok(answer(vec![])), now).unwrap();
                report(&out, &clean, call.token.0, &mut outstanding);
                let (close, out) = m.poll_close();
                report(&out, &clean, u64::MAX, &mut outstanding);
                closes.extend(close);
            }
            for c in closes {
                assert_eq!(c.request.share_session_epoch, -1);
                assert_eq!(c.request.member_id.as_deref(), Some(ID));
                let ok: BTreeSet<SharePartition> = (c.request.topics.iter())
                    .flat_map(|t| {
                        t.partitions
                            .iter()
                            .map(|q| SharePartition::new(t.topic_id, q.partition_index))
                    })
                    .collect();
                let partitions = (ok.iter())
                    .map(|q| sa::PartitionData::default().with_partition_index(q.partition))
                    .collect();
                clean.insert(c.token.0, ok);
                let r = ShareAcknowledgeResponse::default().with_responses(vec![
                    sa::ShareAcknowledgeTopicResponse::default()
                        .with_topic_id(T)
                        .with_partitions(partitions),
                ]);
                let out = m.handle_ack(c.token, Ok(r)).unwrap();
                report(&out, &clean, c.token.0, &mut outstanding);
            }
            assert!(m.is_closed(), "seed {seed}");
            assert!(m.poll_close().0.is_none());
            assert!(
                outstanding.is_empty(),
                "seed {seed}: never reported: {outstanding:?}"
            );
        }
        let (ok, failed) = reported.get();
        assert!(ok > 100 && failed > 100, "{ok} ok, {failed} failed");
    }

    #[test]
    fn ranges_are_covered_and_carved() {
        let mut r = BTreeMap::from([(0, 4), (5, 9), (20, 29)]);
        assert!(covered(&r, 0, 9));
        assert!(!covered(&r, 8, 20));
        carve(&mut r, 3, 6);
        assert_eq!(r, BTreeMap::from([(0, 2), (7, 9), (20, 29)]));
        carve(&mut r, 25, 25);
        assert_eq!(r, BTreeMap::from([(0, 2), (7, 9), (20, 24), (26, 29)]));
    }
}
