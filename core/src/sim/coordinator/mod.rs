//! A sans-IO simulated group coordinator for one group, faithful to apache/kafka's
//! `GroupMetadataManager` / `ClassicGroup` rules (docs: `design/protocol.md` §4, §7, §8).
//!
//! Feed it decoded requests with [`SimCoordinator::handle_request`]; take answers with
//! [`SimCoordinator::poll_response`] (some come later: parked JoinGroup / SyncGroup, and answers
//! that wait for their record to be appended); drive its timers with
//! [`SimCoordinator::poll_timeout`] / [`SimCoordinator::handle_timeout`]. It never reads a clock
//! and draws member ids from a seeded RNG, so a run replays from its seed.
//!
//! The rules live with their protocol, each branch naming the broker method it models:
//! - this module: the [`SimCoordinator`] type, request routing (the `GroupCoordinatorService`
//!   checks every group API goes through), the timers and appends both protocols share, and the
//!   broker-level APIs (`KafkaApis.handleFindCoordinatorRequest`,
//!   `KafkaApis.handleTopicMetadataRequest`);
//! - `classic`: JoinGroup / SyncGroup / Heartbeat / LeaveGroup and static membership
//!   (`GroupMetadataManager.java`, `classic/ClassicGroup.java`);
//! - `offsets`: OffsetCommit / OffsetFetch (`OffsetMetadataManager.java`);
//! - `consumer`: KIP-848 `ConsumerGroupHeartbeat` (`GroupMetadataManager.java`,
//!   `modern/consumer/CurrentAssignmentBuilder.java`, `modern/consumer/ConsumerGroup.java`);
//! - `messages`: error answers, error codes and one-line descriptions of requests and answers,
//!   which do not depend on a group's state;
//! - `log`: the group's partition as `CoordinatorRuntime` drives it: writes that commit after
//!   [`CoordinatorConfig::append_latency`], answers that wait for them, appends that fail or time
//!   out ([`AppendFault`], [`AppendFaults`]), unload ([`SimCoordinator::unload`]) and load on
//!   another node ([`SimCoordinator::load`]) replaying only committed records.
//!
//! Simplified: one group per coordinator (other group ids get NOT_COORDINATOR); no group
//! deletion (`Dead` only while unloaded); a request to a group that does
//! not exist yet with a member id is answered UNKNOWN_MEMBER_ID for every API (the new
//! coordinator answers some with GROUP_ID_NOT_FOUND); the target assignment of a KIP-848 group
//! is computed on the request path by the first heartbeat after the group epoch moved (4.3+:
//! and the assignment interval elapsed; no offloading), with the `uniform` / `range` assignors
//! (`assignors`) of the configured broker release (`rules`); regular expression subscriptions and
//! online migration between classic and consumer groups are not modelled.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, MetadataRequest,
    MetadataResponse, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::ConnId;
use super::codes::*;
use crate::request::{Api, RequestBody, ResponseBody, api_key_of};

mod assignors;
mod classic;
mod consumer;
mod log;
mod messages;
mod offsets;
mod rules;
pub mod streams;

pub use classic::GroupState;
use classic::{ClassicGroup, ClassicMemberState, JoinTimer};
use consumer::ConsumerGroup;
pub use consumer::ConsumerMemberView;
pub use log::{AppendFault, AppendFaults, Residence};
use log::{Image, OpStart, Record, Write};
pub use messages::{
    describe_request, describe_response, error_body, error_response, name, response_error, topic_id,
};
pub use rules::{BrokerProfile, BrokerRules, ServerAssignor};

/// Settings of a [`SimCoordinator`]. Defaults are the broker's, except
/// `group.initial.rebalance.delay.ms` (0, as the design notes advise for tests).
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// The group this coordinator serves.
    pub group_id: String,
    /// This broker's node id.
    pub node_id: i32,
    /// This broker's advertised host.
    pub host: String,
    /// This broker's advertised port.
    pub port: i32,
    /// Topics and their partition counts, for Metadata and the KIP-848 assignment.
    pub topics: Vec<(String, i32)>,
    /// `group.min.session.timeout.ms` (6000).
    pub min_session_timeout: Duration,
    /// `group.max.session.timeout.ms` (1800000).
    pub max_session_timeout: Duration,
    /// `group.initial.rebalance.delay.ms` (broker default 3000; 0 here).
    pub initial_rebalance_delay: Duration,
    /// `CLASSIC_GROUP_NEW_MEMBER_JOIN_TIMEOUT_MS` (300000).
    pub new_member_join_timeout: Duration,
    /// `group.max.size` (unbounded).
    pub group_max_size: usize,
    /// How long a record takes to be committed (replicated): answers that wait for an append
    /// (a static member's replacement in a stable group, the leader's assignment, offset commits)
    /// go out this long after the request was processed.
    pub append_latency: Duration,
    /// `group.consumer.session.timeout.ms` (45000).
    pub consumer_session_timeout: Duration,
    /// `group.consumer.heartbeat.interval.ms` (5000).
    pub consumer_heartbeat_interval: Duration,
    /// The write timeout of group operations (`offsets.commit.timeout.ms`, 5000): an operation
    /// whose records are not committed by then fails with COORDINATOR_NOT_AVAILABLE while its
    /// records still commit.
    pub write_timeout: Duration,
    /// Seeded faults of appends (none by default); scripted ones:
    /// [`SimCoordinator::fault_next_append`].
    pub append_faults: AppendFaults,
    /// Keep the committed state a coordinator that takes over replays, and tell which KIP-848
    /// operations write records (a copy of the KIP-848 group per operation: O(members)). Off,
    /// a load replays the state as it was at the unload, and only classic records and offset
    /// commits make answers wait for a commit of their own.
    pub keep_log: bool,
    /// Seed of the member-id generator.
    pub seed: u64,
    /// The broker release and its version-dependent settings (`rules`).
    pub rules: BrokerRules,
    /// Streams groups (KIP-1071): session timeout, heartbeat interval, standby replicas and the
    /// task ownership index ([`streams::OwnershipIndex`]; the broker's per-process one by
    /// default).
    pub streams: streams::StreamsGroupSettings,
}

impl CoordinatorConfig {
    /// A coordinator for `group_id` on node 1 (`sim-broker:9092`), without topics.
    pub fn new(group_id: impl Into<String>) -> Self {
        Self {
            group_id: group_id.into(),
            node_id: 1,
            host: "sim-broker".into(),
            port: 9092,
            topics: Vec::new(),
            min_session_timeout: Duration::from_millis(6000),
            max_session_timeout: Duration::from_millis(1_800_000),
            initial_rebalance_delay: Duration::ZERO,
            new_member_join_timeout: Duration::from_millis(300_000),
            group_max_size: usize::MAX,
            append_latency: Duration::from_millis(5),
            consumer_session_timeout: Duration::from_millis(45_000),
            consumer_heartbeat_interval: Duration::from_millis(5_000),
            write_timeout: Duration::from_millis(5_000),
            append_faults: AppendFaults::default(),
            keep_log: true,
            seed: 0,
            rules: BrokerRules::default(),
            streams: streams::StreamsGroupSettings::default(),
        }
    }
}

/// An answer the coordinator produced, for the connection and correlation id it answers.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The connection the request came on.
    pub conn: ConnId,
    /// The request's correlation id.
    pub correlation: i32,
    /// The version the request was sent at (the answer is encoded at it).
    pub version: i16,
    /// The answer.
    pub body: ResponseBody,
}
/// Where a parked request's answer goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Parked {
    conn: ConnId,
    correlation: i32,
    version: i16,
}
/// What an append completes once committed.
#[derive(Debug, Clone)]
enum Append {
    /// `updateStaticMemberThenRebalanceOrCompleteJoin`'s appendFuture (Stable, protocol unchanged):
    /// `member_id` replaced `old` (kept to revert the replacement if the append fails).
    StaticReplacement {
        member_id: String,
        /// The generation when the replacement was made.
        generation: i32,
        old: Box<ClassicMemberState>,
        current_leader: Option<String>,
        skip_assignment: bool,
    },
    /// `classicGroupSync`'s appendFuture for the leader's assignment.
    SyncAssignment {
        generation: i32,
        assignment: BTreeMap<String, Bytes>,
    },
    /// Any answer that waits for its records.
    Answer(Box<Reply>),
    /// Offset commits and RequireStable offset fetches (`offsets`).
    Offsets(Box<offsets::OffsetAppend>),
}
/// Per-member timers (one per member id) with their deadlines also kept in time order, so the
/// earliest one and the due ones are found without a scan of every member.
#[derive(Debug)]
struct Timers<V> {
    by_id: BTreeMap<String, (Instant, V)>,
    by_time: BTreeSet<(Instant, String)>,
}

impl<V: Clone> Timers<V> {
    fn new() -> Self {
        Self {
            by_id: BTreeMap::new(),
            by_time: BTreeSet::new(),
        }
    }

    /// Sets (or moves) the member's timer.
    fn insert(&mut self, id: String, at: Instant, value: V) {
        match self.by_id.get_mut(&id) {
            Some(slot) => {
                let old = std::mem::replace(slot, (at, value)).0;
                if old != at {
                    self.by_time.remove(&(old, id.clone()));
                    self.by_time.insert((at, id));
                }
            }
            None => {
                self.by_time.insert((at, id.clone()));
                self.by_id.insert(id, (at, value));
            }
        }
    }

    /// Cancels the member's timer.
    fn remove(&mut self, id: &str) -> Option<(Instant, V)> {
        let (at, value) = self.by_id.remove(id)?;
        self.by_time.remove(&(at, id.to_owned()));
        Some((at, value))
    }

    /// The earliest deadline.
    fn next(&self) -> Option<Instant> {
        self.by_time.first().map(|(t, _)| *t)
    }

    /// The timers due at `now`, by member id.
    fn due(&self, now: Instant) -> Vec<(String, V)> {
        let mut due: Vec<(String, V)> = self
            .by_time
            .iter()
            .take_while(|(t, _)| *t <= now)
            .map(|(_, id)| (id.clone(), self.by_id[id].1.clone()))
            .collect();
        due.sort_by(|a, b| a.0.cmp(&b.0));
        due
    }
}
/// One member of the group as the coordinator sees it (for tests and invariants).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberView {
    /// The member id.
    pub member_id: String,
    /// The instance id of a static member.
    pub instance_id: Option<String>,
    /// Whether a JoinGroup of this member is parked.
    pub awaiting_join: bool,
    /// Whether a SyncGroup of this member is parked.
    pub awaiting_sync: bool,
    /// The stored assignment bytes (classic; empty for KIP-848 members, whose assignment
    /// [`SimCoordinator::consumer_members`] shows).
    pub assignment: Bytes,
    /// KIP-848 member epoch (-1 for classic members).
    pub epoch: i32,
}
/// A simulated group coordinator (sans-IO). See the module docs.
///
/// `ConsumerGroupHeartbeat` (KIP-848, `GroupMetadataManager.consumerGroupHeartbeat`) follows the
/// broker's steps, each in a method named after the one it models:
/// - the member: dynamic (`getOrMaybeSubscribeDynamicConsumerGroupMember`: created on epoch 0,
///   reused on epoch 0 since KAFKA-19233 (4.2+), else UNKNOWN_MEMBER_ID / the epoch check
///   `throwIfConsumerGroupMemberEpochIsInvalid`, which accepts the previous epoch only with owned
///   partitions that are a subset of the assignment) or static
///   (`getOrMaybeSubscribeStaticConsumerGroupMember`: epoch 0 with the instance held by a member
///   whose epoch is not -2 ⇒ UNRELEASED_INSTANCE_ID even for the same member id, else the new
///   member id replaces the old one and inherits its assignment with epochs reset to 0
///   (`replaceMember`); other epochs: unknown instance ⇒ UNKNOWN_MEMBER_ID, instance held by
///   another member id ⇒ FENCED_INSTANCE_ID);
/// - the group epoch is bumped when a subscription changes (`hasMemberSubscriptionChanged`) or a
///   member is fenced (`consumerGroupFenceMember`); the next heartbeat of any member recomputes
///   the target assignment (`maybeUpdateTargetAssignment` with the `uniform` or `range`
///   assignor, -2 members included: their partitions stay reserved; 4.3+ at most once per
///   assignment interval);
/// - the member is reconciled towards its target (`maybeReconcile` / `CurrentAssignmentBuilder`):
///   partitions leaving a member go to `partitionsPendingRevocation` and the member stays in its
///   epoch until a heartbeat's owned partitions no longer contain them; a partition is given to
///   its new owner only once no other member holds it (`currentPartitionEpoch`), so ownership
///   moves only through a revocation the old owner acknowledged, or its removal;
/// - timers: session timeout (`scheduleConsumerGroupSessionTimeout`, removes the member) and
///   rebalance timeout while revoking (`scheduleConsumerGroupRebalanceTimeout`);
/// - leaves (`consumerGroupLeave`): -1 removes the member, -2 keeps a static member with epoch -2
///   and its assignment, pending revocations cleared (`consumerGroupStaticMemberGroupLeave`).
#[derive(Debug)]
pub struct SimCoordinator {
    config: CoordinatorConfig,
    rng: ChaCha8Rng,
    active: bool,
    classic: Option<ClassicGroup>,
    consumer: Option<ConsumerGroup>,
    /// Streams groups (KIP-1071), with their own session and rebalance timers.
    streams: streams::StreamsGroups,
    heartbeats: Timers<()>,
    consumer_sessions: Timers<()>,
    /// KIP-848 member ids the last removal of which was a session expiry (the invariants give
    /// those no zombie excuse: the member's lease ran out first).
    consumer_session_expired: std::collections::BTreeSet<String>,
    /// `consumerGroupRebalanceTimeoutKey`: deadline and the epoch the member must leave.
    consumer_rebalance_timeouts: Timers<i32>,
    join_timer: Option<(Instant, JoinTimer)>,
    sync_timer: Option<(Instant, i32)>,
    /// What the current operation completes once its records commit (moved to `log` when it
    /// ends; the time is not used).
    appends: VecDeque<(Instant, Append)>,
    /// Classic records the current operation writes.
    op_records: Vec<Record>,
    /// Writes appended, not committed yet, in log order.
    log: VecDeque<Write>,
    /// What the committed records rebuild (what a coordinator that takes over loads).
    committed: Image,
    residence: Residence,
    forced_faults: VecDeque<AppendFault>,
    failed_appends: u64,
    fault_rng: ChaCha8Rng,
    replies: VecDeque<Reply>,
    offsets: BTreeMap<(String, i32), (i64, Option<String>)>,
    /// Static registrations reverted after their member was answered (see
    /// [`SimCoordinator::take_reverted_registrations`]).
    reverted: Vec<(String, String)>,
    /// Broker hazards met since the last [`SimCoordinator::take_hazards`].
    hazards: Vec<String>,
    notes: Vec<String>,
    notes_enabled: bool,
    now: Instant,
}

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_owned())
}

fn ms(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

impl SimCoordinator {
    /// A coordinator with an empty group, active, at `now`.
    pub fn new(config: CoordinatorConfig, now: Instant) -> Self {
        Self {
            streams: streams::StreamsGroups::new(config.streams.clone()),
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            fault_rng: ChaCha8Rng::seed_from_u64(config.seed ^ 0x00a9_9e7d),
            config,
            active: true,
            classic: None,
            consumer: None,
            heartbeats: Timers::new(),
            consumer_sessions: Timers::new(),
            consumer_session_expired: std::collections::BTreeSet::new(),
            consumer_rebalance_timeouts: Timers::new(),
            join_timer: None,
            sync_timer: None,
            appends: VecDeque::new(),
            op_records: Vec::new(),
            log: VecDeque::new(),
            committed: Image::default(),
            residence: Residence::Active,
            forced_faults: VecDeque::new(),
            failed_appends: 0,
            replies: VecDeque::new(),
            offsets: BTreeMap::new(),
            reverted: Vec::new(),
            hazards: Vec::new(),
            notes: Vec::new(),
            notes_enabled: true,
            now,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CoordinatorConfig {
        &self.config
    }

    /// Whether to keep notes naming the broker rule behind each decision ([`Self::take_notes`]).
    pub fn set_notes(&mut self, on: bool) {
        self.notes_enabled = on;
    }

    /// Static registrations (instance id, member id) a failed or timed-out append reverted after
    /// a rebalance had already answered the new member id: the broker's revert
    /// (`updateStaticMemberThenRebalanceOrCompleteJoin`'s appendFuture callback) checks no
    /// state, so that member is fenced at its next request although no other process holds the
    /// instance id. Since the last call.
    pub fn take_reverted_registrations(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.reverted)
    }

    /// Hazards of the broker's rules met since the last call (not member bugs): a KIP-848 member
    /// whose removal a failed append reverted keeps no session timeout
    /// (`consumerGroupFenceMembers` cancels the timers at once, the timeline revert does not
    /// bring them back), so it stays in the group until the partition is loaded again.
    pub fn take_hazards(&mut self) -> Vec<String> {
        std::mem::take(&mut self.hazards)
    }

    /// The notes since the last call: one line per broker rule applied.
    pub fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    /// Makes the coordinator inactive (every group request answered COORDINATOR_NOT_AVAILABLE,
    /// `GroupCoordinatorService`'s `isActive` check) or active again.
    pub fn set_active(&mut self, active: bool) {
        self.active = active;
    }

    /// The classic group's state (`None` before the first JoinGroup).
    pub fn state(&self) -> Option<GroupState> {
        self.classic.as_ref().map(|g| g.state)
    }

    /// The classic group's generation (0 before the first rebalance), or the KIP-848 group epoch.
    pub fn generation(&self) -> i32 {
        match (&self.classic, &self.consumer) {
            (Some(g), _) => g.generation,
            (None, Some(c)) => c.epoch,
            _ => 0,
        }
    }

    /// The classic group's leader.
    pub fn leader(&self) -> Option<&str> {
        self.classic.as_ref().and_then(|g| g.leader.as_deref())
    }

    /// The member id the instance id maps to.
    pub fn static_member(&self, instance_id: &str) -> Option<&str> {
        if let Some(g) = &self.classic {
            return g.static_members.get(instance_id).map(|x| x.as_str());
        }
        self.consumer
            .as_ref()
            .and_then(|c| c.static_members.get(instance_id).map(|x| x.as_str()))
    }

    /// The members, by member id.
    pub fn members(&self) -> Vec<MemberView> {
        if let Some(g) = &self.classic {
            return g
                .members
                .values()
                .map(|m| MemberView {
                    member_id: m.member_id.clone(),
                    instance_id: m.instance_id.clone(),
                    awaiting_join: m.awaiting_join.is_some(),
                    awaiting_sync: m.awaiting_sync.is_some(),
                    assignment: m.assignment.clone(),
                    epoch: -1,
                })
                .collect();
        }
        self.consumer
            .as_ref()
            .map(|c| {
                c.members
                    .iter()
                    .map(|(id, m)| MemberView {
                        member_id: id.clone(),
                        instance_id: m.instance_id.clone(),
                        awaiting_join: false,
                        awaiting_sync: false,
                        assignment: Bytes::new(),
                        epoch: m.epoch,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The KIP-848 group's members with their reconciliation state (empty without a consumer
    /// group).
    /// Whether a request of `api` is served by the group coordinator runtime (and so is held up
    /// by a coordinator stall), rather than by the broker's request handlers directly.
    pub fn is_group_api(api: impl Into<Api>) -> bool {
        let api = api.into();
        if api == Api::STREAMS_GROUP_HEARTBEAT || api == Api::STREAMS_GROUP_DESCRIBE {
            // GroupCoordinatorService.streamsGroupHeartbeat / streamsGroupDescribe.
            return true;
        }
        let Some(api) = api.kafka() else {
            return false;
        };
        matches!(
            api,
            ApiKey::JoinGroup
                | ApiKey::SyncGroup
                | ApiKey::Heartbeat
                | ApiKey::LeaveGroup
                | ApiKey::OffsetCommit
                | ApiKey::OffsetFetch
                | ApiKey::ConsumerGroupHeartbeat
        )
    }

    fn note(&mut self, f: impl FnOnce() -> String) {
        if self.notes_enabled {
            self.notes.push(f());
        }
    }

    fn reply(&mut self, p: Parked, body: impl Into<ResponseBody>) {
        self.replies.push_back(Reply {
            conn: p.conn,
            correlation: p.correlation,
            version: p.version,
            body: body.into(),
        });
    }

    /// The next answer, in the order they were produced.
    pub fn poll_response(&mut self) -> Option<Reply> {
        self.replies.pop_front()
    }

    /// The earliest timer (session expiry, join/sync phase, append commit).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut consider = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
        if let Some(t) = self.heartbeats.next() {
            consider(t);
        }
        if let Some(t) = self.consumer_sessions.next() {
            consider(t);
        }
        if let Some(t) = self.consumer_rebalance_timeouts.next() {
            consider(t);
        }
        if let Some((t, _)) = self.join_timer {
            consider(t);
        }
        if let Some((t, _)) = self.sync_timer {
            consider(t);
        }
        if let Some(t) = self.log_timeout() {
            consider(t);
        }
        if let Some(t) = self.streams.next_deadline() {
            consider(t);
        }
        next
    }

    /// Fires every timer due at `now`, earliest first.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        // Writes commit in log order; operations time out; a load completes.
        self.timer_op(|c| c.advance_log(now));
        if let Some((t, timer)) = self.join_timer
            && t <= now
        {
            self.join_timer = None;
            self.timer_op(|c| match timer {
                JoinTimer::Initial { delay, remaining } => {
                    c.try_complete_initial_rebalance(delay, remaining)
                }
                JoinTimer::Complete => c.complete_join(),
            });
        }
        if let Some((t, generation)) = self.sync_timer
            && t <= now
        {
            self.sync_timer = None;
            self.timer_op(|c| c.expire_pending_sync(generation));
        }
        for (id, ()) in self.heartbeats.due(now) {
            self.heartbeats.remove(&id);
            self.timer_op(|c| c.expire_heartbeat(&id));
        }
        for (id, ()) in self.consumer_sessions.due(now) {
            self.consumer_sessions.remove(&id);
            self.timer_op(|c| c.consumer_session_expired(&id));
        }
        for (id, epoch) in self.consumer_rebalance_timeouts.due(now) {
            self.consumer_rebalance_timeouts.remove(&id);
            self.timer_op(|c| c.consumer_rebalance_timeout_expired(&id, epoch));
        }
        // Streams session and rebalance timeouts (scheduleStreamsGroupSessionTimeout,
        // scheduleStreamsGroupRebalanceTimeout): applied at once, as streams writes are.
        if self.streams.next_deadline().is_some_and(|t| t <= now) {
            self.streams.expire(now);
            self.note(|| "streams: session or rebalance timeout fenced a member".into());
        }
    }

    /// Runs a timer's operation (`CoordinatorTimer` tasks are write operations too): its records
    /// go to the log; no append fault.
    fn timer_op(&mut self, f: impl FnOnce(&mut Self)) {
        let op: OpStart = self.begin_op(false);
        f(self);
        self.end_op(op, None);
    }

    /// Handles one request read from `conn` at `version`. The answer comes out of
    /// [`poll_response`](Self::poll_response), now or later.
    pub fn handle_request(
        &mut self,
        conn: ConnId,
        correlation: i32,
        client_id: &str,
        version: i16,
        request: RequestBody,
        now: Instant,
    ) {
        self.now = self.now.max(now);
        let p = Parked {
            conn,
            correlation,
            version,
        };
        // The dispatch point of the streams-group requests (KIP-1071).
        let request = match request {
            RequestBody::Kafka(request) => request,
            RequestBody::StreamsGroupHeartbeat(_)
            | RequestBody::StreamsGroupDescribe(_)
            | RequestBody::StreamsGroupTopologyDescriptionUpdate(_) => {
                return self.streams_request(p, request);
            }
        };
        let Some(api) = api_key_of(&request) else {
            // A body kind this crate does not list is no group API.
            return self.dispatch(p, client_id, request);
        };
        // GroupCoordinatorService: an inactive coordinator answers COORDINATOR_NOT_AVAILABLE.
        if Self::is_group_api(api) && !self.active {
            let body = error_response(&request, version, COORDINATOR_NOT_AVAILABLE);
            return self.reply(p, body);
        }
        if Self::is_group_api(api) {
            let code = match self.residence {
                Residence::Active => NONE,
                // CoordinatorRuntime.contextOrThrow: no context for the partition here.
                Residence::Unloaded => NOT_COORDINATOR,
                // CoordinatorRuntime.withActiveContextOrThrow: the partition is loading.
                Residence::Loading { .. } => COORDINATOR_LOAD_IN_PROGRESS,
            };
            if code != NONE {
                self.note(|| format!("coordinator runtime: {:?} answered {}", api, name(code)));
                let body = error_response(&request, version, code);
                return self.reply(p, body);
            }
        }
        // Group operations other than OffsetFetch (a read) are write events.
        let op =
            (Self::is_group_api(api) && api != ApiKey::OffsetFetch).then(|| self.begin_op(true));
        self.dispatch(p, client_id, request);
        if let Some(op) = op {
            self.end_op(op, Some((p, api)));
        }
    }

    fn dispatch(&mut self, p: Parked, client_id: &str, request: RequestKind) {
        let version = p.version;
        match request {
            RequestKind::FindCoordinator(r) => self.find_coordinator(p, r),
            RequestKind::Metadata(r) => self.metadata(p, r),
            RequestKind::JoinGroup(r) => self.join(p, client_id, r),
            RequestKind::SyncGroup(r) => self.sync(p, r),
            RequestKind::Heartbeat(r) => self.heartbeat(p, r),
            RequestKind::LeaveGroup(r) => self.leave(p, r),
            RequestKind::OffsetCommit(r) => self.offset_commit(p, r),
            RequestKind::OffsetFetch(r) => self.offset_fetch(p, r),
            RequestKind::ConsumerGroupHeartbeat(r) => self.consumer_heartbeat(p, r),
            other => {
                let body = error_response(&other, version, UNSUPPORTED_VERSION);
                self.reply(p, body)
            }
        }
    }

    /// A streams-group request (KIP-1071), served by [`streams::StreamsGroups`] after the
    /// runtime's checks every group API goes through (`GroupCoordinatorService`: inactive ⇒
    /// COORDINATOR_NOT_AVAILABLE; `CoordinatorRuntime`: unloaded ⇒ NOT_COORDINATOR, loading ⇒
    /// COORDINATOR_LOAD_IN_PROGRESS).
    ///
    /// Simplified: streams writes are applied at once and answered at once (no append: no
    /// append latency, no append faults, no write timeout), and the streams groups are not in
    /// the log, so a coordinator move (`unload` / `load`) keeps them unchanged, timers included,
    /// as if every streams record had been committed before the move. Streams groups live in
    /// their own namespace: a group id shared with a classic or consumer group is not refused
    /// (the broker's `GroupMetadataManager.streamsGroup` answers GROUP_ID_NOT_FOUND for a group
    /// of another type).
    fn streams_request(&mut self, p: Parked, request: RequestBody) {
        let code = if !self.active {
            COORDINATOR_NOT_AVAILABLE
        } else {
            match self.residence {
                Residence::Active => NONE,
                Residence::Unloaded => NOT_COORDINATOR,
                Residence::Loading { .. } => COORDINATOR_LOAD_IN_PROGRESS,
            }
        };
        if code != NONE {
            self.note(|| {
                format!(
                    "coordinator runtime: {:?} answered {}",
                    request.api(),
                    name(code)
                )
            });
            let body = error_body(&request, p.version, code);
            return self.reply(p, body);
        }
        let now = self.now;
        let body = match &request {
            RequestBody::StreamsGroupHeartbeat(r) => {
                let topics: BTreeMap<String, i32> = self.config.topics.iter().cloned().collect();
                let answer = self.streams.heartbeat(r, p.version, &topics, now);
                ResponseBody::StreamsGroupHeartbeat(answer)
            }
            RequestBody::StreamsGroupDescribe(r) => {
                ResponseBody::StreamsGroupDescribe(self.streams.describe(r, p.version))
            }
            // A broker without a topology description plugin (KIP-1331; the simulated
            // coordinator has none): GroupCoordinatorService
            // .throwIfStreamsGroupTopologyDescriptionUpdateInvalid.
            RequestBody::StreamsGroupTopologyDescriptionUpdate(_) => {
                error_body(&request, p.version, UNSUPPORTED_VERSION)
            }
            RequestBody::Kafka(_) => return,
        };
        self.reply(p, body)
    }

    /// The streams groups (KIP-1071) this coordinator serves.
    pub fn streams(&self) -> &streams::StreamsGroups {
        &self.streams
    }

    /// Answers the request with `code` without processing it: the coordinator runtime failing an
    /// operation (a partition being reloaded, a write that timed out; mapped by
    /// `CoordinatorOperationExceptionHelper`). For scripted faults.
    pub fn fail_request(
        &mut self,
        conn: ConnId,
        correlation: i32,
        version: i16,
        request: &RequestBody,
        code: i16,
    ) {
        let body = error_body(request, version, code);
        self.note(|| format!("runtime fails {:?} with {}", request.api(), name(code)));
        self.reply(
            Parked {
                conn,
                correlation,
                version,
            },
            body,
        );
    }

    // ------------------------------------------------------------------ broker-level APIs

    /// KafkaApis.handleFindCoordinatorRequest: the leader of the group's offsets partition
    /// (node `n` listens on the configured port + `n` - 1); KafkaApis.getCoordinator answers
    /// COORDINATOR_NOT_AVAILABLE while the partition has no leader (after an unload, before the
    /// next load).
    fn find_coordinator(&mut self, p: Parked, r: FindCoordinatorRequest) {
        let mut resp = FindCoordinatorResponse::default();
        let node = self.config.node_id;
        let port = self.config.port + node - 1;
        let code = if self.residence == Residence::Unloaded {
            COORDINATOR_NOT_AVAILABLE
        } else {
            NONE
        };
        let (node, port, host) = if code == NONE {
            (node, port, s(&self.config.host))
        } else {
            (-1, -1, s(""))
        };
        if p.version >= 4 {
            resp.coordinators = r
                .coordinator_keys
                .iter()
                .map(|k| {
                    Coordinator::default()
                        .with_key(k.clone())
                        .with_node_id(BrokerId(node))
                        .with_host(host.clone())
                        .with_port(port)
                        .with_error_code(code)
                })
                .collect();
        } else {
            resp.node_id = BrokerId(node);
            resp.host = host;
            resp.port = port;
            resp.error_code = code;
        }
        self.reply(p, ResponseKind::FindCoordinator(resp));
    }

    /// KafkaApis.handleTopicMetadataRequest over the configured topics.
    fn metadata(&mut self, p: Parked, r: MetadataRequest) {
        let wanted: Option<BTreeSet<String>> = r.topics.as_ref().map(|ts| {
            ts.iter()
                .filter_map(|t| t.name.as_ref().map(|n| n.to_string()))
                .collect()
        });
        let mut topics = Vec::new();
        let known: BTreeMap<&str, i32> = self
            .config
            .topics
            .iter()
            .map(|(n, c)| (n.as_str(), *c))
            .collect();
        let names: Vec<String> = match &wanted {
            Some(w) => w.iter().cloned().collect(),
            None => known.keys().map(|k| k.to_string()).collect(),
        };
        for name in names {
            let mut t = MetadataResponseTopic::default()
                .with_name(Some(TopicName(s(&name))))
                .with_topic_id(topic_id(&name));
            match known.get(name.as_str()) {
                Some(count) => {
                    t.partitions = (0..*count)
                        .map(|i| {
                            MetadataResponsePartition::default()
                                .with_partition_index(i)
                                .with_leader_id(BrokerId(self.config.node_id))
                                .with_replica_nodes(vec![BrokerId(self.config.node_id)])
                                .with_isr_nodes(vec![BrokerId(self.config.node_id)])
                        })
                        .collect();
                }
                None => {
                    t.error_code = UNKNOWN_TOPIC_OR_PARTITION;
                    t.topic_id = uuid::Uuid::nil();
                }
            }
            topics.push(t);
        }
        let resp = MetadataResponse::default()
            .with_brokers(vec![
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(self.config.node_id))
                    .with_host(s(&self.config.host))
                    .with_port(self.config.port),
            ])
            .with_cluster_id(Some(s("sim-cluster")))
            .with_controller_id(BrokerId(self.config.node_id))
            .with_topics(topics);
        self.reply(p, ResponseKind::Metadata(resp));
    }

    /// A record was committed: the answer or the group change that waited for it goes ahead.
    fn append_committed(&mut self, a: Append) {
        match a {
            Append::Answer(reply) => self.replies.push_back(*reply),
            Append::Offsets(a) => self.offsets_committed(*a),
            Append::SyncAssignment {
                generation,
                assignment,
            } => self.sync_assignment_committed(generation, assignment),
            Append::StaticReplacement {
                member_id,
                current_leader,
                skip_assignment,
                ..
            } => self.static_replacement_committed(member_id, current_leader, skip_assignment),
        }
    }
}
