//! A sans-IO simulated group coordinator for one group, faithful to apache/kafka's
//! `GroupMetadataManager` / `ClassicGroup` rules (docs: `design/protocol.md` §4, §7, §8).
//!
//! Feed it decoded requests with [`SimCoordinator::handle_request`]; take answers with
//! [`SimCoordinator::poll_response`] (some come later: parked JoinGroup / SyncGroup, and answers
//! that wait for their record to be appended); drive its timers with
//! [`SimCoordinator::poll_timeout`] / [`SimCoordinator::handle_timeout`]. It never reads a clock
//! and draws member ids from a seeded RNG, so a run replays from its seed.
//!
//! Classic group rules modelled (apache/kafka group-coordinator, `GroupMetadataManager.java` and
//! `classic/ClassicGroup.java`; each branch below names its method):
//! - JoinGroup: pre-checks (`GroupCoordinatorService.joinGroup`, `classicGroupJoin`), new members
//!   (`classicGroupJoinNewMember`, `classicGroupJoinNewStaticMember`,
//!   `classicGroupJoinNewDynamicMember`), existing members (`classicGroupJoinExistingMember`,
//!   `ClassicGroup.validateMember`), static replacement
//!   (`updateStaticMemberThenRebalanceOrCompleteJoin`, `ClassicGroup.replaceStaticMember`),
//!   the join phase (`prepareRebalance`, `maybeCompleteJoinElseSchedule`,
//!   `tryCompleteInitialRebalanceElseSchedule`, `completeClassicGroupJoin`,
//!   `ClassicGroup.maybeElectNewJoinedLeader`, `ClassicGroup.initNextGeneration`).
//! - SyncGroup (`classicGroupSync`, `validateSyncGroup`, `setAndPropagateAssignment`,
//!   `resetAndPropagateAssignmentWithError`), pending-sync expiry (`expirePendingSync`).
//! - Heartbeat (`classicGroupHeartbeat`, `validateClassicGroupHeartbeat`), session expiry
//!   (`expireClassicGroupMemberHeartbeat`, `ClassicGroupMember.hasSatisfiedHeartbeat`).
//! - LeaveGroup (`classicGroupLeave`, `removeCurrentMemberFromClassicGroup`).
//! - OffsetCommit (`OffsetMetadataManager.commitOffset`, `ClassicGroup.validateOffsetCommit`) and
//!   OffsetFetch.
//!
//! KIP-848 consumer groups (`GroupMetadataManager.consumerGroupHeartbeat`) are modelled in a
//! reduced form: see [`SimCoordinator`]'s docs on `ConsumerGroupHeartbeat`.
//!
//! Simplified: one group per coordinator (other group ids get NOT_COORDINATOR); appends never
//! fail; no group deletion (`Dead`) and no coordinator failover; a request to a group that does
//! not exist yet with a member id is answered UNKNOWN_MEMBER_ID for every API (the new
//! coordinator answers some with GROUP_ID_NOT_FOUND); the assignment in a KIP-848 group is a
//! round-robin over partitions computed at once (no assignment interval, no offloading).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::consumer_group_heartbeat_response::{
    Assignment as CghAssignment, TopicPartitions as CghTopicPartitions,
};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartitions, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, HeartbeatRequest, HeartbeatResponse,
    JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, MetadataRequest,
    MetadataResponse, OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest,
    OffsetFetchResponse, RequestKind, ResponseKind, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::ConnId;
use super::codes::*;
use crate::core::io::api_key_of;

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
    /// Seed of the member-id generator.
    pub seed: u64,
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
            seed: 0,
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
    pub body: ResponseKind,
}

/// A classic group's state (`ClassicGroupState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum GroupState {
    /// No members.
    Empty,
    /// Waiting for members to (re)join.
    PreparingRebalance,
    /// Waiting for the leader's assignment.
    CompletingRebalance,
    /// Assignment propagated.
    Stable,
    /// Removed (never reached in the simulation).
    Dead,
}

impl GroupState {
    /// Whether `PREPARING_REBALANCE.validPreviousStates()` contains this state
    /// (`ClassicGroup.canRebalance`).
    fn can_rebalance(self) -> bool {
        matches!(
            self,
            GroupState::Stable | GroupState::CompletingRebalance | GroupState::Empty
        )
    }
}

/// Where a parked request's answer goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Parked {
    conn: ConnId,
    correlation: i32,
    version: i16,
}

/// A classic member (`ClassicGroupMember`).
#[derive(Debug, Clone)]
struct ClassicMemberState {
    member_id: String,
    instance_id: Option<String>,
    rebalance_timeout_ms: i32,
    session_timeout_ms: i32,
    protocol_type: String,
    protocols: Vec<(String, Bytes)>,
    assignment: Bytes,
    awaiting_join: Option<Parked>,
    awaiting_sync: Option<Parked>,
    is_new: bool,
}

impl ClassicMemberState {
    /// `ClassicGroupMember.hasSatisfiedHeartbeat`.
    fn has_satisfied_heartbeat(&self) -> bool {
        if self.is_new {
            false
        } else {
            self.awaiting_join.is_some() || self.awaiting_sync.is_some()
        }
    }

    /// `ClassicGroupMember.matches`: same protocols, names and metadata bytes.
    fn matches(&self, protocols: &[(String, Bytes)]) -> bool {
        self.protocols == protocols
    }

    /// `ClassicGroupMember.vote`: the first of the member's protocols among the candidates.
    fn vote(&self, candidates: &BTreeSet<String>) -> Option<String> {
        self.protocols
            .iter()
            .map(|(n, _)| n)
            .find(|n| candidates.contains(*n))
            .cloned()
    }

    fn metadata(&self, protocol: Option<&str>) -> Bytes {
        self.protocols
            .iter()
            .find(|(n, _)| Some(n.as_str()) == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }
}

/// The join timer (`classicGroupJoinKey`).
#[derive(Debug, Clone, Copy)]
enum JoinTimer {
    /// `tryCompleteInitialRebalanceElseSchedule(delay, remaining)`.
    Initial {
        delay: Duration,
        remaining: Duration,
    },
    /// `completeClassicGroupJoin`.
    Complete,
}

/// What an append completes once committed.
#[derive(Debug, Clone)]
enum Append {
    /// `updateStaticMemberThenRebalanceOrCompleteJoin`'s appendFuture (Stable, protocol unchanged).
    StaticReplacement {
        member_id: String,
        current_leader: Option<String>,
        skip_assignment: bool,
    },
    /// `classicGroupSync`'s appendFuture for the leader's assignment.
    SyncAssignment {
        generation: i32,
        assignment: BTreeMap<String, Bytes>,
    },
    /// Any answer that waits for its records (offset commits).
    Answer(Box<Reply>),
}

/// A classic group (`ClassicGroup`).
#[derive(Debug, Clone)]
struct ClassicGroup {
    state: GroupState,
    previous_state: GroupState,
    generation: i32,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    leader: Option<String>,
    members: BTreeMap<String, ClassicMemberState>,
    static_members: BTreeMap<String, String>,
    pending_join: BTreeSet<String>,
    pending_sync: BTreeSet<String>,
    new_member_added: bool,
}

impl ClassicGroup {
    fn new() -> Self {
        Self {
            state: GroupState::Empty,
            previous_state: GroupState::Dead,
            generation: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: BTreeMap::new(),
            static_members: BTreeMap::new(),
            pending_join: BTreeSet::new(),
            pending_sync: BTreeSet::new(),
            new_member_added: false,
        }
    }

    fn transition(&mut self, to: GroupState) {
        self.previous_state = self.state;
        self.state = to;
    }

    fn is_leader(&self, member_id: &str) -> bool {
        self.leader.as_deref() == Some(member_id)
    }

    fn num_awaiting_join(&self) -> usize {
        self.members
            .values()
            .filter(|m| m.awaiting_join.is_some())
            .count()
    }

    /// `ClassicGroup.hasAllMembersJoined`.
    fn has_all_members_joined(&self) -> bool {
        self.members.len() == self.num_awaiting_join() && self.pending_join.is_empty()
    }

    /// `ClassicGroup.rebalanceTimeoutMs`: the max of the members'.
    fn rebalance_timeout(&self) -> Duration {
        let ms = self
            .members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0);
        Duration::from_millis(ms.max(0) as u64)
    }

    /// `ClassicGroup.supportsProtocols`.
    fn supports_protocols(&self, protocol_type: &str, names: &BTreeSet<String>) -> bool {
        if self.state == GroupState::Empty {
            return !protocol_type.is_empty() && !names.is_empty();
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && names.iter().any(|n| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(p, _)| p == n))
            })
    }

    /// `ClassicGroup.candidateProtocols`.
    fn candidate_protocols(&self) -> BTreeSet<String> {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            for (n, _) in &m.protocols {
                *counts.entry(n).or_default() += 1;
            }
        }
        counts
            .into_iter()
            .filter(|(_, c)| *c == self.members.len())
            .map(|(n, _)| n.to_owned())
            .collect()
    }

    /// `ClassicGroup.selectProtocol`: most votes among protocols every member supports (ties go
    /// to the smallest name; Java's tie-break follows HashMap order).
    fn select_protocol(&self) -> Option<String> {
        let candidates = self.candidate_protocols();
        let mut votes: BTreeMap<String, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(v) = m.vote(&candidates) {
                *votes.entry(v).or_default() += 1;
            }
        }
        let max = votes.values().copied().max()?;
        votes.into_iter().find(|(_, c)| *c == max).map(|(n, _)| n)
    }

    /// `ClassicGroup.validateMember`.
    fn validate_member(&self, member_id: &str, instance_id: Option<&str>) -> Result<(), i16> {
        if let Some(instance) = instance_id {
            match self.static_members.get(instance) {
                None => return Err(UNKNOWN_MEMBER_ID),
                Some(existing) if existing != member_id => return Err(FENCED_INSTANCE_ID),
                Some(_) => {}
            }
        }
        if !self.members.contains_key(member_id) {
            return Err(UNKNOWN_MEMBER_ID);
        }
        Ok(())
    }

    /// `ClassicGroup.add`.
    fn add(&mut self, member: ClassicMemberState) {
        if let Some(instance) = &member.instance_id {
            self.static_members
                .insert(instance.clone(), member.member_id.clone());
        }
        if self.members.is_empty() {
            self.protocol_type = Some(member.protocol_type.clone());
        }
        if self.leader.is_none() {
            self.leader = Some(member.member_id.clone());
        }
        self.pending_join.remove(&member.member_id);
        self.members.insert(member.member_id.clone(), member);
    }

    /// `ClassicGroup.remove`: the member's parked futures are dropped unanswered.
    fn remove(&mut self, member_id: &str) -> Option<ClassicMemberState> {
        let removed = self.members.remove(member_id);
        if let Some(m) = &removed
            && let Some(instance) = &m.instance_id
        {
            self.static_members.remove(instance);
        }
        if self.is_leader(member_id) {
            self.leader = self.members.keys().next().cloned();
        }
        self.pending_join.remove(member_id);
        self.pending_sync.remove(member_id);
        removed
    }

    /// `ClassicGroup.currentClassicGroupMembers`.
    fn join_members(&self, version: i16) -> Vec<JoinGroupResponseMember> {
        self.members
            .values()
            .map(|m| {
                JoinGroupResponseMember::default()
                    .with_member_id(s(&m.member_id))
                    .with_group_instance_id(if version >= 5 {
                        m.instance_id.as_deref().map(s)
                    } else {
                        None
                    })
                    .with_metadata(m.metadata(self.protocol_name.as_deref()))
            })
            .collect()
    }
}

/// A KIP-848 member (`ConsumerGroupMember`), reduced to what membership needs.
#[derive(Debug, Clone)]
struct ConsumerMemberState {
    instance_id: Option<String>,
    epoch: i32,
    previous_epoch: i32,
    topics: Vec<String>,
    assigned: BTreeSet<(String, i32)>,
}

/// A KIP-848 group (`ConsumerGroup`), reduced.
#[derive(Debug, Clone, Default)]
struct ConsumerGroup {
    epoch: i32,
    members: BTreeMap<String, ConsumerMemberState>,
    static_members: BTreeMap<String, String>,
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
    /// The stored assignment bytes (classic) or the assigned partitions' count (consumer).
    pub assignment: Bytes,
    /// KIP-848 member epoch (-1 for classic members).
    pub epoch: i32,
}

/// A simulated group coordinator (sans-IO). See the module docs.
///
/// `ConsumerGroupHeartbeat` (KIP-848, `GroupMetadataManager.consumerGroupHeartbeat`) is modelled
/// for membership: epoch 0 joins (dynamic known member reused since KAFKA-19233; static with the
/// instance held by a member whose epoch is not -2 ⇒ UNRELEASED_INSTANCE_ID, else replacement),
/// epoch > 0 checks (unknown ⇒ UNKNOWN_MEMBER_ID; instance held by another id ⇒
/// FENCED_INSTANCE_ID; newer than current ⇒ FENCED_MEMBER_EPOCH; older accepted only if it is the
/// previous epoch), leave -1 (removed) and -2 (kept with epoch -2), session expiry. Assignments
/// move in one step (no revocation phase).
#[derive(Debug)]
pub struct SimCoordinator {
    config: CoordinatorConfig,
    rng: ChaCha8Rng,
    active: bool,
    classic: Option<ClassicGroup>,
    consumer: Option<ConsumerGroup>,
    heartbeats: BTreeMap<String, Instant>,
    consumer_sessions: BTreeMap<String, Instant>,
    join_timer: Option<(Instant, JoinTimer)>,
    sync_timer: Option<(Instant, i32)>,
    appends: VecDeque<(Instant, Append)>,
    replies: VecDeque<Reply>,
    offsets: BTreeMap<(String, i32), (i64, Option<String>)>,
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
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            config,
            active: true,
            classic: None,
            consumer: None,
            heartbeats: BTreeMap::new(),
            consumer_sessions: BTreeMap::new(),
            join_timer: None,
            sync_timer: None,
            appends: VecDeque::new(),
            replies: VecDeque::new(),
            offsets: BTreeMap::new(),
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

    /// Whether a request of `api` is served by the group coordinator runtime (and so is held up
    /// by a coordinator stall), rather than by the broker's request handlers directly.
    pub fn is_group_api(api: ApiKey) -> bool {
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

    fn reply(&mut self, p: Parked, body: ResponseKind) {
        self.replies.push_back(Reply {
            conn: p.conn,
            correlation: p.correlation,
            version: p.version,
            body,
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
        if let Some(t) = self.heartbeats.values().min() {
            consider(*t);
        }
        if let Some(t) = self.consumer_sessions.values().min() {
            consider(*t);
        }
        if let Some((t, _)) = self.join_timer {
            consider(t);
        }
        if let Some((t, _)) = self.sync_timer {
            consider(t);
        }
        if let Some(t) = self.appends.iter().map(|(t, _)| *t).min() {
            consider(t);
        }
        next
    }

    /// Fires every timer due at `now`, earliest first.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        // Appends commit in order.
        while let Some((t, _)) = self.appends.front()
            && *t <= now
        {
            let (_, a) = self.appends.pop_front().expect("checked");
            self.append_committed(a);
        }
        if let Some((t, timer)) = self.join_timer
            && t <= now
        {
            self.join_timer = None;
            match timer {
                JoinTimer::Initial { delay, remaining } => {
                    self.try_complete_initial_rebalance(delay, remaining)
                }
                JoinTimer::Complete => self.complete_join(),
            }
        }
        if let Some((t, generation)) = self.sync_timer
            && t <= now
        {
            self.sync_timer = None;
            self.expire_pending_sync(generation);
        }
        let due: Vec<String> = self
            .heartbeats
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for id in due {
            self.heartbeats.remove(&id);
            self.expire_heartbeat(&id);
        }
        let due: Vec<String> = self
            .consumer_sessions
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for id in due {
            self.consumer_sessions.remove(&id);
            self.consumer_session_expired(&id);
        }
    }

    /// Handles one request read from `conn` at `version`. The answer comes out of
    /// [`poll_response`](Self::poll_response), now or later.
    pub fn handle_request(
        &mut self,
        conn: ConnId,
        correlation: i32,
        client_id: &str,
        version: i16,
        request: RequestKind,
        now: Instant,
    ) {
        self.now = self.now.max(now);
        let p = Parked {
            conn,
            correlation,
            version,
        };
        let api = api_key_of(&request);
        // GroupCoordinatorService: an inactive coordinator answers COORDINATOR_NOT_AVAILABLE.
        if Self::is_group_api(api) && !self.active {
            let body = error_response(&request, version, COORDINATOR_NOT_AVAILABLE);
            return self.reply(p, body);
        }
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

    /// Answers the request with `code` without processing it: the coordinator runtime failing an
    /// operation (a partition being reloaded, a write that timed out; mapped by
    /// `CoordinatorOperationExceptionHelper`). For scripted faults.
    pub fn fail_request(
        &mut self,
        conn: ConnId,
        correlation: i32,
        version: i16,
        request: &RequestKind,
        code: i16,
    ) {
        let body = error_response(request, version, code);
        self.note(|| {
            format!(
                "runtime fails {:?} with {}",
                api_key_of(request),
                name(code)
            )
        });
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

    /// KafkaApis.handleFindCoordinatorRequest: this broker leads the offsets partition of every
    /// group it is asked about.
    fn find_coordinator(&mut self, p: Parked, r: FindCoordinatorRequest) {
        let mut resp = FindCoordinatorResponse::default();
        if p.version >= 4 {
            resp.coordinators = r
                .coordinator_keys
                .iter()
                .map(|k| {
                    Coordinator::default()
                        .with_key(k.clone())
                        .with_node_id(BrokerId(self.config.node_id))
                        .with_host(s(&self.config.host))
                        .with_port(self.config.port)
                })
                .collect();
        } else {
            resp.node_id = BrokerId(self.config.node_id);
            resp.host = s(&self.config.host);
            resp.port = self.config.port;
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
                    t.error_code = 3; // UNKNOWN_TOPIC_OR_PARTITION
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

    // ------------------------------------------------------------------ classic: JoinGroup

    fn join_error(p: Parked, member_id: &str, code: i16) -> ResponseKind {
        ResponseKind::JoinGroup(
            JoinGroupResponse::default()
                .with_member_id(s(member_id))
                .with_error_code(code)
                .with_protocol_name(if p.version >= 7 { None } else { Some(s("")) }),
        )
    }

    /// A successful JoinGroup answer for the current generation.
    fn join_ok(
        g: &ClassicGroup,
        p: Parked,
        member_id: &str,
        members: Vec<JoinGroupResponseMember>,
        leader: Option<&str>,
        skip_assignment: bool,
    ) -> ResponseKind {
        ResponseKind::JoinGroup(
            JoinGroupResponse::default()
                .with_members(members)
                .with_member_id(s(member_id))
                .with_generation_id(g.generation)
                .with_protocol_name(g.protocol_name.as_deref().map(s).or(if p.version >= 7 {
                    None
                } else {
                    Some(s(""))
                }))
                .with_protocol_type(if p.version >= 7 {
                    g.protocol_type.as_deref().map(s)
                } else {
                    None
                })
                .with_leader(s(leader.unwrap_or("")))
                .with_skip_assignment(skip_assignment && p.version >= 9),
        )
    }

    /// `classicGroupJoin`.
    fn join(&mut self, p: Parked, client_id: &str, r: JoinGroupRequest) {
        let member_id = r.member_id.to_string();
        let group_id = r.group_id.0.to_string();
        // GroupCoordinatorService.joinGroup: empty group id => INVALID_GROUP_ID.
        if group_id.is_empty() {
            return self.reply(p, Self::join_error(p, &member_id, INVALID_GROUP_ID));
        }
        if group_id != self.config.group_id {
            return self.reply(p, Self::join_error(p, &member_id, NOT_COORDINATOR));
        }
        // classicGroupJoin: session timeout outside [min, max] => INVALID_SESSION_TIMEOUT.
        let session = r.session_timeout_ms;
        if session < ms(self.config.min_session_timeout)
            || session > ms(self.config.max_session_timeout)
        {
            return self.reply(p, Self::join_error(p, &member_id, INVALID_SESSION_TIMEOUT));
        }
        if self
            .consumer
            .as_ref()
            .is_some_and(|c| !c.members.is_empty())
        {
            // classicGroupJoinToConsumerGroup (mixed groups) is not modelled.
            return self.reply(
                p,
                Self::join_error(p, &member_id, INCONSISTENT_GROUP_PROTOCOL),
            );
        }
        let unknown = member_id.is_empty();
        // getOrMaybeCreateClassicGroup: created only for an unknown member id.
        if self.classic.is_none() {
            if !unknown {
                self.note(|| "classicGroupJoin: group missing and member id given".into());
                return self.reply(p, Self::join_error(p, &member_id, UNKNOWN_MEMBER_ID));
            }
            self.classic = Some(ClassicGroup::new());
            self.consumer = None;
        }
        // acceptJoiningMember.
        if !self.accept_joining_member(&member_id) {
            self.group().remove(&member_id);
            return self.reply(p, Self::join_error(p, "", GROUP_MAX_SIZE_REACHED));
        }
        if unknown {
            self.join_new_member(p, client_id, r);
        } else {
            self.join_existing_member(p, r);
        }
    }

    fn group(&mut self) -> &mut ClassicGroup {
        self.classic.as_mut().expect("classic group exists")
    }

    fn g(&self) -> &ClassicGroup {
        self.classic.as_ref().expect("classic group exists")
    }

    /// `acceptJoiningMember`.
    fn accept_joining_member(&self, member_id: &str) -> bool {
        let g = self.g();
        let max = self.config.group_max_size;
        match g.state {
            GroupState::Empty | GroupState::Dead => true,
            GroupState::PreparingRebalance => {
                g.members
                    .get(member_id)
                    .is_some_and(|m| m.awaiting_join.is_some())
                    || g.num_awaiting_join() < max
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                g.members.contains_key(member_id) || g.members.len() < max
            }
        }
    }

    /// `ClassicGroup.generateMemberId`: `<instance id or client id>-<uuid>` from the seeded RNG.
    fn generate_member_id(&mut self, client_id: &str, instance_id: Option<&str>) -> String {
        let mut bytes = [0u8; 16];
        self.rng.fill_bytes(&mut bytes);
        let uuid = uuid::Builder::from_random_bytes(bytes).into_uuid();
        format!("{}-{uuid}", instance_id.unwrap_or(client_id))
    }

    fn protocols_of(r: &JoinGroupRequest) -> Vec<(String, Bytes)> {
        r.protocols
            .iter()
            .map(|p| (p.name.to_string(), p.metadata.clone()))
            .collect()
    }

    fn protocol_names(r: &JoinGroupRequest) -> BTreeSet<String> {
        r.protocols.iter().map(|p| p.name.to_string()).collect()
    }

    /// `classicGroupJoinNewMember`.
    fn join_new_member(&mut self, p: Parked, client_id: &str, r: JoinGroupRequest) {
        let names = Self::protocol_names(&r);
        let g = self.g();
        if g.state == GroupState::Dead {
            return self.reply(p, Self::join_error(p, "", COORDINATOR_NOT_AVAILABLE));
        }
        if !g.supports_protocols(&r.protocol_type, &names) {
            return self.reply(p, Self::join_error(p, "", INCONSISTENT_GROUP_PROTOCOL));
        }
        let instance = r.group_instance_id.as_ref().map(|i| i.to_string());
        let new_id = self.generate_member_id(client_id, instance.as_deref());
        match instance {
            Some(instance) => self.join_new_static_member(p, r, instance, new_id),
            None if p.version >= 4 => {
                // classicGroupJoinNewDynamicMember: requiresKnownMemberId (v4+): park the id as
                // pending, expire it after the session timeout, answer MEMBER_ID_REQUIRED.
                self.group().pending_join.insert(new_id.clone());
                let at = self.now + Duration::from_millis(r.session_timeout_ms.max(0) as u64);
                self.heartbeats.insert(new_id.clone(), at);
                self.note(|| {
                    format!(
                        "classicGroupJoinNewDynamicMember: pending {new_id}, MEMBER_ID_REQUIRED"
                    )
                });
                self.reply(p, Self::join_error(p, &new_id, MEMBER_ID_REQUIRED));
            }
            None => self.add_member_then_rebalance_or_complete_join(p, client_id, r, new_id),
        }
    }

    /// `classicGroupJoinNewStaticMember`.
    fn join_new_static_member(
        &mut self,
        p: Parked,
        r: JoinGroupRequest,
        instance: String,
        new_id: String,
    ) {
        match self.g().static_members.get(&instance).cloned() {
            Some(old_id) => {
                self.note(|| {
                    format!("classicGroupJoinNewStaticMember: instance {instance} known as {old_id}; replacing with {new_id}")
                });
                self.update_static_member_then_rebalance_or_complete_join(p, r, old_id, new_id);
            }
            None => {
                self.note(|| {
                    format!("classicGroupJoinNewStaticMember: new instance {instance} as {new_id}")
                });
                self.add_member_then_rebalance_or_complete_join(p, "", r, new_id);
            }
        }
    }

    /// `ClassicGroup.replaceStaticMember`: the old member's parked Join and Sync are answered
    /// FENCED_INSTANCE_ID; the new member inherits everything, assignment included.
    fn replace_static_member(&mut self, instance: &str, old_id: &str, new_id: &str) {
        let Some(mut old) = self.group().members.remove(old_id) else {
            return;
        };
        if let Some(j) = old.awaiting_join.take() {
            let body = ResponseKind::JoinGroup(
                JoinGroupResponse::default()
                    .with_member_id(s(old_id))
                    .with_protocol_name(if j.version >= 7 { None } else { Some(s("")) })
                    .with_leader(s(""))
                    .with_error_code(FENCED_INSTANCE_ID),
            );
            self.note(|| format!("replaceStaticMember: parked JoinGroup of {old_id} fenced"));
            self.reply(j, body);
        }
        if let Some(sy) = old.awaiting_sync.take() {
            let body = ResponseKind::SyncGroup(
                SyncGroupResponse::default()
                    .with_assignment(Bytes::new())
                    .with_error_code(FENCED_INSTANCE_ID),
            );
            self.note(|| format!("replaceStaticMember: parked SyncGroup of {old_id} fenced"));
            self.reply(sy, body);
        }
        let g = self.group();
        old.member_id = new_id.to_owned();
        old.is_new = false;
        g.members.insert(new_id.to_owned(), old);
        if g.is_leader(old_id) {
            g.leader = Some(new_id.to_owned());
        }
        g.static_members
            .insert(instance.to_owned(), new_id.to_owned());
    }

    /// `updateStaticMemberThenRebalanceOrCompleteJoin`.
    fn update_static_member_then_rebalance_or_complete_join(
        &mut self,
        p: Parked,
        r: JoinGroupRequest,
        old_id: String,
        new_id: String,
    ) {
        let instance = r
            .group_instance_id
            .as_ref()
            .map(|i| i.to_string())
            .unwrap_or_default();
        let current_leader = self.g().leader.clone();
        self.replace_static_member(&instance, &old_id, &new_id);
        // Heartbeat of the old id expires without effect; schedule the new one.
        self.reschedule_heartbeat(&new_id, None);
        self.update_member(&new_id, &r, Some(p));
        match self.g().state {
            GroupState::Stable => {
                let selected = self.g().select_protocol();
                if selected.is_some() && selected == self.g().protocol_name {
                    // Protocol unchanged: no rebalance; persist, then answer the current
                    // generation (v9+: the leader gets the members and SkipAssignment).
                    self.note(|| {
                        format!("static member {new_id} joins Stable group without protocol change: no rebalance, answer after the append")
                    });
                    self.appends.push_back((
                        self.now + self.config.append_latency,
                        Append::StaticReplacement {
                            member_id: new_id,
                            current_leader,
                            skip_assignment: p.version >= 9,
                        },
                    ));
                } else {
                    self.maybe_prepare_rebalance_or_complete_join("static member changed protocol");
                }
            }
            GroupState::CompletingRebalance => {
                // The old id may already be in the leader's assignment: always rebalance.
                self.prepare_rebalance("static member replaced while completing rebalance");
            }
            _ => self.maybe_complete_join_phase(),
        }
    }

    /// `ClassicGroup.updateMember`: protocols and timeouts; parks `future` (replacing a parked
    /// one without answering it).
    fn update_member(&mut self, member_id: &str, r: &JoinGroupRequest, future: Option<Parked>) {
        let protocols = Self::protocols_of(r);
        if let Some(m) = self.group().members.get_mut(member_id) {
            m.protocols = protocols;
            m.rebalance_timeout_ms = r.rebalance_timeout_ms;
            m.session_timeout_ms = r.session_timeout_ms;
            m.awaiting_join = future;
        }
    }

    /// `addMemberThenRebalanceOrCompleteJoin`.
    fn add_member_then_rebalance_or_complete_join(
        &mut self,
        p: Parked,
        _client_id: &str,
        r: JoinGroupRequest,
        member_id: String,
    ) {
        let member = ClassicMemberState {
            member_id: member_id.clone(),
            instance_id: r.group_instance_id.as_ref().map(|i| i.to_string()),
            rebalance_timeout_ms: r.rebalance_timeout_ms,
            session_timeout_ms: r.session_timeout_ms,
            protocol_type: r.protocol_type.to_string(),
            protocols: Self::protocols_of(&r),
            assignment: Bytes::new(),
            awaiting_join: Some(p),
            is_new: true,
            awaiting_sync: None,
        };
        let g = self.group();
        if g.state == GroupState::PreparingRebalance && g.previous_state == GroupState::Empty {
            g.new_member_added = true;
        }
        g.add(member);
        // New members time out after CLASSIC_GROUP_NEW_MEMBER_JOIN_TIMEOUT_MS.
        let timeout = self.config.new_member_join_timeout;
        self.reschedule_heartbeat(&member_id, Some(timeout));
        self.maybe_prepare_rebalance_or_complete_join("adding new member");
    }

    /// `classicGroupJoinExistingMember`.
    fn join_existing_member(&mut self, p: Parked, r: JoinGroupRequest) {
        let member_id = r.member_id.to_string();
        let instance = r.group_instance_id.as_ref().map(|i| i.to_string());
        let names = Self::protocol_names(&r);
        let g = self.g();
        if g.state == GroupState::Dead {
            return self.reply(
                p,
                Self::join_error(p, &member_id, COORDINATOR_NOT_AVAILABLE),
            );
        }
        if !g.supports_protocols(&r.protocol_type, &names) {
            return self.reply(
                p,
                Self::join_error(p, &member_id, INCONSISTENT_GROUP_PROTOCOL),
            );
        }
        if g.pending_join.contains(&member_id) {
            // A pending (MEMBER_ID_REQUIRED) dynamic member is added now; a static one here is an
            // IllegalStateException in the broker (UNKNOWN_SERVER_ERROR on the wire).
            if instance.is_some() {
                return self.reply(p, Self::join_error(p, &member_id, UNKNOWN_SERVER_ERROR));
            }
            self.note(|| format!("classicGroupJoinExistingMember: pending {member_id} added"));
            return self.add_member_then_rebalance_or_complete_join(p, "", r, member_id);
        }
        if let Err(code) = g.validate_member(&member_id, instance.as_deref()) {
            self.note(|| {
                format!(
                    "ClassicGroup.validateMember({member_id}, {instance:?}) on join: {}",
                    name(code)
                )
            });
            return self.reply(p, Self::join_error(p, &member_id, code));
        }
        let protocols = Self::protocols_of(&r);
        let m = &g.members[&member_id];
        match g.state {
            GroupState::PreparingRebalance => {
                if m.awaiting_join.is_some() {
                    self.note(|| {
                        format!("join of {member_id} while PreparingRebalance replaces its parked join (never answered)")
                    });
                }
                self.update_member_then_rebalance_or_complete_join(p, &member_id, &r);
            }
            GroupState::CompletingRebalance => {
                if m.matches(&protocols) {
                    // Same metadata: re-send the current generation's answer.
                    let members = if g.is_leader(&member_id) {
                        g.join_members(p.version)
                    } else {
                        Vec::new()
                    };
                    let body = Self::join_ok(g, p, &member_id, members, g.leader.as_deref(), false);
                    self.reply(p, body);
                } else {
                    self.update_member_then_rebalance_or_complete_join(p, &member_id, &r);
                }
            }
            GroupState::Stable => {
                if g.is_leader(&member_id) || !m.matches(&protocols) {
                    // The leader's join always rebalances; a follower's changed metadata too.
                    self.note(|| format!("join of {member_id} in Stable: rebalance"));
                    self.update_member_then_rebalance_or_complete_join(p, &member_id, &r);
                } else {
                    // A follower with identical metadata gets the current generation at once.
                    let body =
                        Self::join_ok(g, p, &member_id, Vec::new(), g.leader.as_deref(), false);
                    self.note(|| {
                        format!("join of follower {member_id} in Stable with same metadata: current generation")
                    });
                    self.reply(p, body);
                }
            }
            GroupState::Empty | GroupState::Dead => {
                self.reply(p, Self::join_error(p, &member_id, UNKNOWN_MEMBER_ID));
            }
        }
    }

    /// `updateMemberThenRebalanceOrCompleteJoin`.
    fn update_member_then_rebalance_or_complete_join(
        &mut self,
        p: Parked,
        member_id: &str,
        r: &JoinGroupRequest,
    ) {
        self.update_member(member_id, r, Some(p));
        self.maybe_prepare_rebalance_or_complete_join("member (re)joined");
    }

    /// `maybePrepareRebalanceOrCompleteJoin`.
    fn maybe_prepare_rebalance_or_complete_join(&mut self, reason: &'static str) {
        if self.g().state.can_rebalance() {
            self.prepare_rebalance(reason);
        } else {
            self.maybe_complete_join_phase();
        }
    }

    /// `maybeCompleteJoinPhase`: never during the initial rebalance.
    fn maybe_complete_join_phase(&mut self) {
        let g = self.g();
        if g.state == GroupState::PreparingRebalance
            && g.has_all_members_joined()
            && g.previous_state != GroupState::Empty
        {
            self.complete_join();
        }
    }

    /// `prepareRebalance`.
    fn prepare_rebalance(&mut self, reason: &'static str) {
        if self.g().state == GroupState::CompletingRebalance {
            self.reset_and_propagate_assignment_with_error(REBALANCE_IN_PROGRESS);
        }
        // removeSyncExpiration.
        self.group().pending_sync.clear();
        self.sync_timer = None;
        let initial = self.g().state == GroupState::Empty;
        if initial {
            let delay = self.config.initial_rebalance_delay;
            let remaining = self.g().rebalance_timeout().saturating_sub(delay);
            self.join_timer = Some((self.now + delay, JoinTimer::Initial { delay, remaining }));
        }
        let generation = self.g().generation;
        self.group().transition(GroupState::PreparingRebalance);
        self.note(|| format!("prepareRebalance (generation {generation}): {reason}"));
        if !initial {
            // maybeCompleteJoinElseSchedule.
            if self.g().has_all_members_joined() {
                self.complete_join();
            } else {
                let at = self.now + self.g().rebalance_timeout();
                self.join_timer = Some((at, JoinTimer::Complete));
            }
        }
    }

    /// `tryCompleteInitialRebalanceElseSchedule`.
    fn try_complete_initial_rebalance(&mut self, delay: Duration, remaining: Duration) {
        let initial = self.config.initial_rebalance_delay;
        let g = self.group();
        if g.new_member_added && !remaining.is_zero() {
            g.new_member_added = false;
            let new_delay = initial.min(remaining);
            let new_remaining = remaining.saturating_sub(delay);
            self.join_timer = Some((
                self.now + new_delay,
                JoinTimer::Initial {
                    delay: new_delay,
                    remaining: new_remaining,
                },
            ));
        } else {
            self.complete_join();
        }
    }

    /// `completeClassicGroupJoin`.
    fn complete_join(&mut self) {
        self.join_timer = None;
        let not_rejoined: Vec<String> = self
            .g()
            .members
            .values()
            .filter(|m| m.awaiting_join.is_none() && m.instance_id.is_none())
            .map(|m| m.member_id.clone())
            .collect();
        for id in &not_rejoined {
            self.group().remove(id);
            self.heartbeats.remove(id);
        }
        if !not_rejoined.is_empty() {
            self.note(|| format!("completeClassicGroupJoin: removed dynamic members that did not rejoin: {not_rejoined:?}"));
        }
        if self.g().state == GroupState::Dead {
            return;
        }
        if !self.maybe_elect_new_joined_leader() && !self.g().members.is_empty() {
            // Nobody rejoined: try again after the rebalance timeout.
            let at = self.now + self.g().rebalance_timeout();
            self.join_timer = Some((at, JoinTimer::Complete));
            self.note(|| "completeClassicGroupJoin: no member rejoined; rescheduled".into());
            return;
        }
        // ClassicGroup.initNextGeneration.
        let g = self.group();
        g.generation += 1;
        if !g.members.is_empty() {
            g.protocol_name = g.select_protocol();
            g.transition(GroupState::CompletingRebalance);
        } else {
            g.protocol_name = None;
            g.transition(GroupState::Empty);
        }
        g.pending_sync.clear();
        let generation = g.generation;
        if g.state == GroupState::Empty {
            self.note(|| format!("generation {generation}: group is empty"));
            return;
        }
        let leader = g.leader.clone();
        let ids: Vec<String> = g.members.keys().cloned().collect();
        self.note(|| {
            format!("completeClassicGroupJoin: generation {generation}, leader {leader:?}")
        });
        for id in ids {
            let g = self.g();
            let m = &g.members[&id];
            if let Some(parked) = m.awaiting_join {
                let members = if g.is_leader(&id) {
                    g.join_members(parked.version)
                } else {
                    Vec::new()
                };
                let body = Self::join_ok(g, parked, &id, members, g.leader.as_deref(), false);
                self.reply(parked, body);
            }
            self.reschedule_heartbeat(&id, None);
            let g = self.group();
            let m = g.members.get_mut(&id).expect("member");
            m.awaiting_join = None;
            m.is_new = false;
            g.pending_sync.insert(id);
        }
        // schedulePendingSync.
        let at = self.now + self.g().rebalance_timeout();
        self.sync_timer = Some((at, generation));
    }

    /// `ClassicGroup.maybeElectNewJoinedLeader`.
    fn maybe_elect_new_joined_leader(&mut self) -> bool {
        let g = self.group();
        let Some(leader) = g.leader.clone() else {
            return false;
        };
        let leader_joined = g
            .members
            .get(&leader)
            .is_some_and(|m| m.awaiting_join.is_some());
        if leader_joined {
            return true;
        }
        match g
            .members
            .values()
            .find(|m| m.awaiting_join.is_some())
            .map(|m| m.member_id.clone())
        {
            Some(new_leader) => {
                g.leader = Some(new_leader);
                true
            }
            None => false,
        }
    }

    /// `rescheduleClassicGroupMemberHeartbeat`: session timeout unless `timeout` is given.
    fn reschedule_heartbeat(&mut self, member_id: &str, timeout: Option<Duration>) {
        let timeout = timeout.unwrap_or_else(|| {
            self.classic
                .as_ref()
                .and_then(|g| g.members.get(member_id))
                .map(|m| Duration::from_millis(m.session_timeout_ms.max(0) as u64))
                .unwrap_or_default()
        });
        self.heartbeats
            .insert(member_id.to_owned(), self.now + timeout);
    }

    /// `expireClassicGroupMemberHeartbeat`.
    fn expire_heartbeat(&mut self, member_id: &str) {
        let Some(g) = self.classic.as_mut() else {
            return;
        };
        if g.state == GroupState::Dead {
            return;
        }
        if g.pending_join.contains(member_id) {
            // removePendingMemberAndUpdateClassicGroup.
            g.remove(member_id);
            self.note(|| format!("pending member {member_id} expired"));
            let g = self.g();
            if g.state == GroupState::PreparingRebalance && g.has_all_members_joined() {
                self.complete_join();
            }
            return;
        }
        let Some(m) = g.members.get(member_id) else {
            return;
        };
        if m.has_satisfied_heartbeat() {
            return;
        }
        self.note(|| format!("session of {member_id} expired: removing it"));
        self.remove_member_and_update_group(member_id);
    }

    /// `removeMemberAndUpdateClassicGroup`: a parked join is answered UNKNOWN_MEMBER_ID first.
    fn remove_member_and_update_group(&mut self, member_id: &str) {
        let parked = self
            .group()
            .members
            .get_mut(member_id)
            .and_then(|m| m.awaiting_join.take());
        if let Some(p) = parked {
            self.reply(p, Self::join_error(p, "", UNKNOWN_MEMBER_ID));
        }
        self.group().remove(member_id);
        match self.g().state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.maybe_prepare_rebalance_or_complete_join("member removed")
            }
            GroupState::PreparingRebalance if self.g().has_all_members_joined() => {
                self.complete_join()
            }
            _ => {}
        }
    }

    // ------------------------------------------------------------------ classic: SyncGroup

    fn sync_response(p: Parked, g: &ClassicGroup, code: i16, assignment: Bytes) -> ResponseKind {
        let ok = code == NONE && p.version >= 5;
        ResponseKind::SyncGroup(
            SyncGroupResponse::default()
                .with_error_code(code)
                .with_protocol_type(if ok {
                    g.protocol_type.as_deref().map(s)
                } else {
                    None
                })
                .with_protocol_name(if ok {
                    g.protocol_name.as_deref().map(s)
                } else {
                    None
                })
                .with_assignment(assignment),
        )
    }

    fn sync_error(code: i16) -> ResponseKind {
        ResponseKind::SyncGroup(SyncGroupResponse::default().with_error_code(code))
    }

    /// `classicGroupSync`.
    fn sync(&mut self, p: Parked, r: SyncGroupRequest) {
        let member_id = r.member_id.to_string();
        if r.group_id.0.as_str() != self.config.group_id {
            return self.reply(p, Self::sync_error(NOT_COORDINATOR));
        }
        let Some(g) = self.classic.as_ref() else {
            return self.reply(p, Self::sync_error(UNKNOWN_MEMBER_ID));
        };
        // validateSyncGroup.
        let instance = r.group_instance_id.as_ref().map(|i| i.to_string());
        let error = if g.state == GroupState::Dead {
            Some(COORDINATOR_NOT_AVAILABLE)
        } else if let Err(code) = g.validate_member(&member_id, instance.as_deref()) {
            Some(code)
        } else if r.generation_id != g.generation {
            Some(ILLEGAL_GENERATION)
        } else if inconsistent(r.protocol_type.as_deref(), g.protocol_type.as_deref())
            || inconsistent(r.protocol_name.as_deref(), g.protocol_name.as_deref())
        {
            Some(INCONSISTENT_GROUP_PROTOCOL)
        } else {
            None
        };
        if let Some(code) = error {
            self.note(|| format!("validateSyncGroup({member_id}): {}", name(code)));
            return self.reply(p, Self::sync_error(code));
        }
        match g.state {
            GroupState::Empty => self.reply(p, Self::sync_error(UNKNOWN_MEMBER_ID)),
            GroupState::PreparingRebalance => {
                self.reply(p, Self::sync_error(REBALANCE_IN_PROGRESS))
            }
            GroupState::CompletingRebalance => {
                let leader = g.is_leader(&member_id);
                let generation = g.generation;
                let all: Vec<String> = g.members.keys().cloned().collect();
                let g = self.group();
                g.members
                    .get_mut(&member_id)
                    .expect("validated")
                    .awaiting_sync = Some(p);
                g.pending_sync.remove(&member_id);
                if g.pending_sync.is_empty() {
                    self.sync_timer = None;
                }
                if leader {
                    let mut assignment: BTreeMap<String, Bytes> = r
                        .assignments
                        .iter()
                        .map(|a| (a.member_id.to_string(), a.assignment.clone()))
                        .collect();
                    for id in all {
                        assignment.entry(id).or_default();
                    }
                    self.note(|| {
                        format!("assignment from leader {member_id} for generation {generation}; persisting")
                    });
                    self.appends.push_back((
                        self.now + self.config.append_latency,
                        Append::SyncAssignment {
                            generation,
                            assignment,
                        },
                    ));
                }
            }
            GroupState::Stable => {
                let body =
                    Self::sync_response(p, g, NONE, g.members[&member_id].assignment.clone());
                self.group().pending_sync.remove(&member_id);
                self.reply(p, body);
            }
            GroupState::Dead => self.reply(p, Self::sync_error(COORDINATOR_NOT_AVAILABLE)),
        }
    }

    /// `setAndPropagateAssignment` / `resetAndPropagateAssignmentWithError` → `propagateAssignment`.
    fn propagate_assignment(&mut self, code: i16) {
        let ids: Vec<String> = self.g().members.keys().cloned().collect();
        for id in ids {
            let parked = self
                .group()
                .members
                .get_mut(&id)
                .and_then(|m| m.awaiting_sync.take());
            if let Some(p) = parked {
                let g = self.g();
                let body = Self::sync_response(p, g, code, g.members[&id].assignment.clone());
                self.reply(p, body);
                self.reschedule_heartbeat(&id, None);
            }
        }
    }

    fn reset_and_propagate_assignment_with_error(&mut self, code: i16) {
        for m in self.group().members.values_mut() {
            m.assignment = Bytes::new();
        }
        self.propagate_assignment(code);
    }

    /// `expirePendingSync`.
    fn expire_pending_sync(&mut self, generation: i32) {
        let Some(g) = self.classic.as_ref() else {
            return;
        };
        if generation != g.generation {
            return;
        }
        if matches!(
            g.state,
            GroupState::CompletingRebalance | GroupState::Stable
        ) && !g.pending_sync.is_empty()
        {
            let pending: Vec<String> = g.pending_sync.iter().cloned().collect();
            for id in &pending {
                self.group().remove(id);
                self.heartbeats.remove(id);
            }
            self.note(|| format!("expirePendingSync: removed {pending:?}"));
            self.prepare_rebalance("members did not sync in time");
        }
    }

    fn append_committed(&mut self, a: Append) {
        match a {
            Append::Answer(reply) => self.replies.push_back(*reply),
            Append::SyncAssignment {
                generation,
                assignment,
            } => {
                // Another member may have joined meanwhile: only if still CompletingRebalance in
                // the same generation.
                let Some(g) = self.classic.as_mut() else {
                    return;
                };
                if g.state == GroupState::CompletingRebalance && g.generation == generation {
                    for (id, m) in g.members.iter_mut() {
                        m.assignment = assignment.get(id).cloned().unwrap_or_default();
                    }
                    self.propagate_assignment(NONE);
                    self.group().transition(GroupState::Stable);
                    self.note(|| format!("generation {generation} stable"));
                }
            }
            Append::StaticReplacement {
                member_id,
                current_leader,
                skip_assignment,
            } => {
                let Some(g) = self.classic.as_ref() else {
                    return;
                };
                // completeJoinFuture(newMember, ...): a no-op if the member was replaced (its
                // future then was answered FENCED_INSTANCE_ID) or answered meanwhile.
                let Some(parked) = g.members.get(&member_id).and_then(|m| m.awaiting_join) else {
                    return;
                };
                let body = if skip_assignment {
                    let leader = g.is_leader(&member_id);
                    let members = if leader {
                        g.join_members(parked.version)
                    } else {
                        Vec::new()
                    };
                    Self::join_ok(g, parked, &member_id, members, g.leader.as_deref(), leader)
                } else {
                    Self::join_ok(
                        g,
                        parked,
                        &member_id,
                        Vec::new(),
                        current_leader.as_deref(),
                        false,
                    )
                };
                self.group()
                    .members
                    .get_mut(&member_id)
                    .expect("checked")
                    .awaiting_join = None;
                self.reply(parked, body);
            }
        }
    }

    // ------------------------------------------------------------------ classic: Heartbeat

    /// `classicGroupHeartbeat` / `validateClassicGroupHeartbeat`.
    fn heartbeat(&mut self, p: Parked, r: HeartbeatRequest) {
        let member_id = r.member_id.to_string();
        let answer =
            |code| ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(code));
        if r.group_id.0.as_str() != self.config.group_id {
            return self.reply(p, answer(NOT_COORDINATOR));
        }
        let Some(g) = self.classic.as_ref() else {
            return self.reply(p, answer(UNKNOWN_MEMBER_ID));
        };
        let instance = r.group_instance_id.as_ref().map(|i| i.to_string());
        let code = if g.state == GroupState::Dead {
            COORDINATOR_NOT_AVAILABLE
        } else if let Err(code) = g.validate_member(&member_id, instance.as_deref()) {
            code
        } else if r.generation_id != g.generation {
            ILLEGAL_GENERATION
        } else {
            match g.state {
                GroupState::Empty => UNKNOWN_MEMBER_ID,
                GroupState::PreparingRebalance => {
                    self.reschedule_heartbeat(&member_id, None);
                    REBALANCE_IN_PROGRESS
                }
                _ => {
                    self.reschedule_heartbeat(&member_id, None);
                    NONE
                }
            }
        };
        if code != NONE && code != REBALANCE_IN_PROGRESS {
            self.note(|| {
                format!(
                    "heartbeat of {member_id} gen {}: {}",
                    r.generation_id,
                    name(code)
                )
            });
        }
        self.reply(p, answer(code));
    }

    // ------------------------------------------------------------------ classic: LeaveGroup

    /// `classicGroupLeave`.
    fn leave(&mut self, p: Parked, r: LeaveGroupRequest) {
        use kafka_protocol::messages::leave_group_request::MemberIdentity;
        let top =
            |code| ResponseKind::LeaveGroup(LeaveGroupResponse::default().with_error_code(code));
        if r.group_id.0.as_str() != self.config.group_id {
            return self.reply(p, top(NOT_COORDINATOR));
        }
        if self.consumer.is_some() && self.classic.is_none() {
            return self.reply(p, top(UNKNOWN_MEMBER_ID));
        }
        let Some(g) = self.classic.as_ref() else {
            return self.reply(p, top(UNKNOWN_MEMBER_ID));
        };
        if g.state == GroupState::Dead {
            return self.reply(p, top(COORDINATOR_NOT_AVAILABLE));
        }
        let members: Vec<MemberIdentity> = if p.version >= 3 {
            r.members.clone()
        } else {
            vec![MemberIdentity::default().with_member_id(r.member_id.clone())]
        };
        let mut responses = Vec::new();
        let mut valid = 0;
        for m in members {
            let member_id = m.member_id.to_string();
            let instance = m.group_instance_id.as_ref().map(|i| i.to_string());
            let g = self.g();
            let code = if member_id.is_empty() {
                // Administrative removal by instance id.
                match instance
                    .as_ref()
                    .and_then(|i| g.static_members.get(i))
                    .cloned()
                {
                    Some(id) => {
                        self.remove_current_member(&id);
                        NONE
                    }
                    None => UNKNOWN_MEMBER_ID,
                }
            } else if g.pending_join.contains(&member_id) {
                self.group().remove(&member_id);
                self.heartbeats.remove(&member_id);
                NONE
            } else {
                match g.validate_member(&member_id, instance.as_deref()) {
                    Ok(()) => {
                        self.remove_current_member(&member_id);
                        NONE
                    }
                    Err(code) => code,
                }
            };
            self.note(|| format!("LeaveGroup {member_id} {instance:?}: {}", name(code)));
            if code == NONE {
                valid += 1;
            }
            responses.push(
                MemberResponse::default()
                    .with_member_id(m.member_id.clone())
                    .with_group_instance_id(m.group_instance_id.clone())
                    .with_error_code(code),
            );
        }
        if valid > 0 {
            match self.g().state {
                GroupState::Stable | GroupState::CompletingRebalance => {
                    self.maybe_prepare_rebalance_or_complete_join("members left")
                }
                GroupState::PreparingRebalance => self.maybe_complete_join_phase(),
                _ => {}
            }
        }
        let body = if p.version >= 3 {
            LeaveGroupResponse::default().with_members(responses)
        } else {
            LeaveGroupResponse::default()
                .with_error_code(responses.first().map_or(NONE, |m| m.error_code))
        };
        self.reply(p, ResponseKind::LeaveGroup(body));
    }

    /// `removeCurrentMemberFromClassicGroup`: a parked join is answered UNKNOWN_MEMBER_ID.
    fn remove_current_member(&mut self, member_id: &str) {
        self.heartbeats.remove(member_id);
        let parked = self
            .group()
            .members
            .get_mut(member_id)
            .and_then(|m| m.awaiting_join.take());
        if let Some(p) = parked {
            self.reply(p, Self::join_error(p, "", UNKNOWN_MEMBER_ID));
        }
        self.group().remove(member_id);
    }

    // ------------------------------------------------------------------ offsets

    /// `OffsetMetadataManager.commitOffset` with `ClassicGroup.validateOffsetCommit` (classic) or
    /// `ConsumerGroup.validateOffsetCommit` (4.0-4.2 rule: the epoch must be the member's).
    fn offset_commit(&mut self, p: Parked, r: OffsetCommitRequest) {
        let generation = r.generation_id_or_member_epoch;
        let member_id = r.member_id.to_string();
        let instance = r.group_instance_id.as_ref().map(|i| i.to_string());
        let code = if r.group_id.0.as_str() != self.config.group_id {
            NOT_COORDINATOR
        } else if let Some(g) = &self.classic {
            self.validate_classic_commit(g, generation, &member_id, instance.as_deref())
        } else if let Some(c) = &self.consumer {
            match c.members.get(&member_id) {
                _ if generation < 0 && c.members.is_empty() => NONE,
                None => UNKNOWN_MEMBER_ID,
                Some(_) if p.version < 9 => UNSUPPORTED_VERSION,
                Some(m) if m.epoch != generation => STALE_MEMBER_EPOCH,
                Some(_) => NONE,
            }
        } else if generation < 0 {
            // A simple group: offsets of a group that does not use group management.
            NONE
        } else if p.version >= 9 {
            GROUP_ID_NOT_FOUND
        } else {
            ILLEGAL_GENERATION
        };
        if code == NONE {
            // In the classic protocol, commits keep the session alive in Stable and
            // PreparingRebalance.
            if let Some(g) = &self.classic
                && matches!(g.state, GroupState::Stable | GroupState::PreparingRebalance)
                && g.members.contains_key(&member_id)
            {
                self.reschedule_heartbeat(&member_id, None);
            }
            for t in &r.topics {
                for part in &t.partitions {
                    self.offsets.insert(
                        (t.name.0.to_string(), part.partition_index),
                        (
                            part.committed_offset,
                            part.committed_metadata.as_ref().map(|m| m.to_string()),
                        ),
                    );
                }
            }
        } else {
            self.note(|| {
                format!(
                    "OffsetCommit by {member_id} gen {generation}: {}",
                    name(code)
                )
            });
        }
        let topics = r
            .topics
            .iter()
            .map(|t| {
                OffsetCommitResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_topic_id(t.topic_id)
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|part| {
                                OffsetCommitResponsePartition::default()
                                    .with_partition_index(part.partition_index)
                                    .with_error_code(code)
                            })
                            .collect(),
                    )
            })
            .collect();
        let reply = Reply {
            conn: p.conn,
            correlation: p.correlation,
            version: p.version,
            body: ResponseKind::OffsetCommit(OffsetCommitResponse::default().with_topics(topics)),
        };
        if code == NONE {
            // The answer waits for the offset records to be committed.
            self.appends.push_back((
                self.now + self.config.append_latency,
                Append::Answer(Box::new(reply)),
            ));
        } else {
            self.replies.push_back(reply);
        }
    }

    /// `ClassicGroup.validateOffsetCommit`.
    fn validate_classic_commit(
        &self,
        g: &ClassicGroup,
        generation: i32,
        member_id: &str,
        instance: Option<&str>,
    ) -> i16 {
        if g.state == GroupState::Dead {
            return COORDINATOR_NOT_AVAILABLE;
        }
        if generation < 0 && g.state == GroupState::Empty {
            return NONE;
        }
        if generation >= 0 || !member_id.is_empty() || instance.is_some() {
            if let Err(code) = g.validate_member(member_id, instance) {
                return code;
            }
            if generation != g.generation {
                return ILLEGAL_GENERATION;
            }
        } else if g.state != GroupState::Empty {
            return UNKNOWN_MEMBER_ID;
        }
        if g.state == GroupState::CompletingRebalance {
            return REBALANCE_IN_PROGRESS;
        }
        NONE
    }

    /// OffsetFetch: the stored offsets (-1 when none). No pending transactional offsets exist, so
    /// RequireStable never waits.
    fn offset_fetch(&mut self, p: Parked, r: OffsetFetchRequest) {
        let lookup = |offsets: &BTreeMap<(String, i32), (i64, Option<String>)>, t: &str, i: i32| {
            offsets
                .get(&(t.to_owned(), i))
                .cloned()
                .unwrap_or((-1, None))
        };
        if p.version >= 8 {
            let groups = r
                .groups
                .iter()
                .map(|g| {
                    let topics = g
                        .topics
                        .clone()
                        .unwrap_or_default()
                        .iter()
                        .map(|t| {
                            OffsetFetchResponseTopics::default()
                                .with_name(t.name.clone())
                                .with_topic_id(t.topic_id)
                                .with_partitions(
                                    t.partition_indexes
                                        .iter()
                                        .map(|i| {
                                            let (o, m) = lookup(&self.offsets, &t.name.0, *i);
                                            OffsetFetchResponsePartitions::default()
                                                .with_partition_index(*i)
                                                .with_committed_offset(o)
                                                .with_metadata(m.map(|m| s(&m)))
                                        })
                                        .collect(),
                                )
                        })
                        .collect();
                    OffsetFetchResponseGroup::default()
                        .with_group_id(g.group_id.clone())
                        .with_topics(topics)
                })
                .collect();
            return self.reply(
                p,
                ResponseKind::OffsetFetch(OffsetFetchResponse::default().with_groups(groups)),
            );
        }
        self.reply(
            p,
            ResponseKind::OffsetFetch(
                OffsetFetchResponse::default().with_error_code(UNSUPPORTED_VERSION),
            ),
        );
    }

    // ------------------------------------------------------------------ KIP-848

    fn cgh_error(code: i16) -> ResponseKind {
        ResponseKind::ConsumerGroupHeartbeat(
            ConsumerGroupHeartbeatResponse::default().with_error_code(code),
        )
    }

    /// `GroupMetadataManager.consumerGroupHeartbeat` (reduced, see the type's docs).
    fn consumer_heartbeat(&mut self, p: Parked, r: ConsumerGroupHeartbeatRequest) {
        let member_id = r.member_id.to_string();
        let epoch = r.member_epoch;
        let instance = r.instance_id.as_ref().map(|i| i.to_string());
        // throwIfConsumerGroupHeartbeatRequestIsInvalid.
        if r.group_id.0.as_str() != self.config.group_id {
            return self.reply(p, Self::cgh_error(NOT_COORDINATOR));
        }
        if (p.version >= 1 || epoch > 0 || epoch == -1) && member_id.trim().is_empty() {
            return self.reply(p, Self::cgh_error(INVALID_REQUEST));
        }
        if epoch < -2 || (epoch == -2 && instance.is_none()) {
            return self.reply(p, Self::cgh_error(INVALID_REQUEST));
        }
        if epoch == 0
            && (r.rebalance_timeout_ms == -1
                || r.topic_partitions.as_ref().is_none_or(|t| !t.is_empty())
                || (r.subscribed_topic_names.is_none() && r.subscribed_topic_regex.is_none()))
        {
            return self.reply(p, Self::cgh_error(INVALID_REQUEST));
        }
        if self.classic.as_ref().is_some_and(|g| !g.members.is_empty()) {
            // Online migration from a classic group is not modelled.
            return self.reply(p, Self::cgh_error(GROUP_ID_NOT_FOUND));
        }
        if self.consumer.is_none() {
            if epoch != 0 {
                return self.reply(p, Self::cgh_error(GROUP_ID_NOT_FOUND));
            }
            self.classic = None;
            self.consumer = Some(ConsumerGroup::default());
        }
        let session = self.config.consumer_session_timeout;
        let c = self.consumer.as_mut().expect("created");
        if epoch == -1 || epoch == -2 {
            // Leave: validate like any request with an epoch (instance checks first).
            if let Some(code) = Self::check_instance(c, instance.as_deref(), &member_id) {
                return self.reply(p, Self::cgh_error(code));
            }
            if !c.members.contains_key(&member_id) {
                return self.reply(p, Self::cgh_error(UNKNOWN_MEMBER_ID));
            }
            if epoch == -1 {
                let m = c.members.remove(&member_id).expect("checked");
                if let Some(i) = &m.instance_id {
                    c.static_members.remove(i);
                }
                self.consumer_sessions.remove(&member_id);
                self.note(|| format!("consumerGroupHeartbeat leave -1: {member_id} removed"));
            } else {
                let m = c.members.get_mut(&member_id).expect("checked");
                m.epoch = -2;
                m.previous_epoch = -2;
                self.note(|| {
                    format!("consumerGroupHeartbeat leave -2: {member_id} kept with epoch -2")
                });
            }
            self.consumer_rebalance();
            let body = ConsumerGroupHeartbeatResponse::default()
                .with_member_id(Some(s(&member_id)))
                .with_member_epoch(epoch);
            return self.reply(p, ResponseKind::ConsumerGroupHeartbeat(body));
        }
        let topics: Option<Vec<String>> = r
            .subscribed_topic_names
            .as_ref()
            .map(|ts| ts.iter().map(|t| t.to_string()).collect());
        if epoch == 0 {
            match instance.as_deref() {
                Some(inst) => match c.static_members.get(inst).cloned() {
                    Some(existing) => {
                        let existing_epoch = c.members.get(&existing).map_or(-2, |m| m.epoch);
                        if existing_epoch != -2 {
                            // throwIfInstanceIdIsUnreleased: even for the same member id.
                            self.note(|| {
                                format!("epoch-0 join of {member_id} for instance {inst} held by {existing} (epoch {existing_epoch}): UNRELEASED_INSTANCE_ID")
                            });
                            return self.reply(p, Self::cgh_error(UNRELEASED_INSTANCE_ID));
                        }
                        // Replacement: the new member inherits the assignment, epochs reset.
                        let old = c.members.remove(&existing);
                        let assigned = old.map(|m| m.assigned).unwrap_or_default();
                        self.consumer_sessions.remove(&existing);
                        c.static_members.insert(inst.to_owned(), member_id.clone());
                        c.members.insert(
                            member_id.clone(),
                            ConsumerMemberState {
                                instance_id: Some(inst.to_owned()),
                                epoch: 0,
                                previous_epoch: 0,
                                topics: topics.clone().unwrap_or_default(),
                                assigned,
                            },
                        );
                        self.note(|| {
                            format!("static member {member_id} replaces {existing} (left with -2)")
                        });
                    }
                    None => {
                        c.static_members.insert(inst.to_owned(), member_id.clone());
                        c.members.insert(
                            member_id.clone(),
                            ConsumerMemberState {
                                instance_id: Some(inst.to_owned()),
                                epoch: 0,
                                previous_epoch: 0,
                                topics: topics.clone().unwrap_or_default(),
                                assigned: BTreeSet::new(),
                            },
                        );
                    }
                },
                None => {
                    // KAFKA-19233: epoch 0 with a known dynamic member id reuses the member.
                    c.members
                        .entry(member_id.clone())
                        .or_insert_with(|| ConsumerMemberState {
                            instance_id: None,
                            epoch: 0,
                            previous_epoch: 0,
                            topics: Vec::new(),
                            assigned: BTreeSet::new(),
                        });
                }
            }
        } else {
            // Epoch > 0: throwIfStaticMemberIsUnknown / throwIfInstanceIdIsFenced, then the
            // epoch check (throwIfConsumerGroupMemberEpochIsInvalid).
            if let Some(code) = Self::check_instance(c, instance.as_deref(), &member_id) {
                return self.reply(p, Self::cgh_error(code));
            }
            let Some(m) = c.members.get(&member_id) else {
                return self.reply(p, Self::cgh_error(UNKNOWN_MEMBER_ID));
            };
            if epoch > m.epoch || (epoch < m.epoch && epoch != m.previous_epoch) {
                let current = m.epoch;
                self.note(|| {
                    format!("{member_id} epoch {epoch} vs {current}: FENCED_MEMBER_EPOCH")
                });
                return self.reply(p, Self::cgh_error(FENCED_MEMBER_EPOCH));
            }
        }
        let c = self.consumer.as_mut().expect("created");
        let m = c.members.get_mut(&member_id).expect("member exists");
        let mut changed = false;
        if let Some(t) = topics
            && t != m.topics
        {
            m.topics = t;
            changed = true;
        }
        let joined = m.epoch <= 0;
        self.consumer_sessions
            .insert(member_id.clone(), self.now + session);
        if changed || joined {
            self.consumer_rebalance();
        }
        let c = self.consumer.as_ref().expect("created");
        let m = &c.members[&member_id];
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, i) in &m.assigned {
            by_topic.entry(t.as_str()).or_default().push(*i);
        }
        let assignment = CghAssignment::default().with_topic_partitions(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    CghTopicPartitions::default()
                        .with_topic_id(topic_id(t))
                        .with_partitions(ps)
                })
                .collect(),
        );
        let body = ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(s(&member_id)))
            .with_member_epoch(m.epoch)
            .with_heartbeat_interval_ms(ms(self.config.consumer_heartbeat_interval))
            .with_assignment(Some(assignment));
        self.reply(p, ResponseKind::ConsumerGroupHeartbeat(body));
    }

    /// `throwIfStaticMemberIsUnknown` / `throwIfInstanceIdIsFenced`.
    fn check_instance(c: &ConsumerGroup, instance: Option<&str>, member_id: &str) -> Option<i16> {
        let inst = instance?;
        match c.static_members.get(inst) {
            None => Some(UNKNOWN_MEMBER_ID),
            Some(id) if id != member_id => Some(FENCED_INSTANCE_ID),
            Some(_) => None,
        }
    }

    /// Bumps the group epoch and recomputes a round-robin target; members with epoch -2 get
    /// nothing. Every active member moves to the new epoch at once.
    fn consumer_rebalance(&mut self) {
        let topics: BTreeMap<String, i32> = self.config.topics.iter().cloned().collect();
        let c = self.consumer.as_mut().expect("consumer group");
        c.epoch += 1;
        let active: Vec<String> = c
            .members
            .iter()
            .filter(|(_, m)| m.epoch != -2)
            .map(|(id, _)| id.clone())
            .collect();
        for m in c.members.values_mut() {
            m.assigned.clear();
        }
        let subscribed: BTreeSet<String> = active
            .iter()
            .flat_map(|id| c.members[id].topics.iter().cloned())
            .collect();
        for t in subscribed {
            let Some(count) = topics.get(&t) else {
                continue;
            };
            let takers: Vec<&String> = active
                .iter()
                .filter(|id| c.members[*id].topics.contains(&t))
                .collect();
            let takers: Vec<String> = takers.into_iter().cloned().collect();
            for i in 0..*count {
                let id = &takers[i as usize % takers.len()];
                c.members
                    .get_mut(id)
                    .expect("member")
                    .assigned
                    .insert((t.clone(), i));
            }
        }
        let epoch = c.epoch;
        for id in active {
            let m = c.members.get_mut(&id).expect("member");
            m.previous_epoch = m.epoch;
            m.epoch = epoch;
        }
    }

    fn consumer_session_expired(&mut self, member_id: &str) {
        let Some(c) = self.consumer.as_mut() else {
            return;
        };
        if let Some(m) = c.members.remove(member_id) {
            if let Some(i) = &m.instance_id {
                c.static_members.remove(i);
            }
            self.note(|| format!("consumer member {member_id} session expired: removed"));
            self.consumer_rebalance();
        }
    }
}

fn inconsistent(request: Option<&str>, group: Option<&str>) -> bool {
    matches!((request, group), (Some(a), Some(b)) if a != b)
}

/// The error's name (`Errors.java`).
pub fn name(code: i16) -> String {
    crate::error::error_name(code)
}

/// A stable topic id for `topic` (a hash of its name), never the zero id.
pub fn topic_id(topic: &str) -> uuid::Uuid {
    let mut h: u128 = 0xcbf2_9ce4_8422_2325_cbf2_9ce4_8422_2325;
    for b in topic.bytes() {
        h ^= u128::from(b);
        h = h.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
    }
    uuid::Uuid::from_u128(h | 1)
}

/// An answer to `request` carrying `code` (and nothing else that could be mistaken for data).
pub fn error_response(request: &RequestKind, version: i16, code: i16) -> ResponseKind {
    match request {
        RequestKind::JoinGroup(r) => ResponseKind::JoinGroup(
            JoinGroupResponse::default()
                .with_member_id(r.member_id.clone())
                .with_error_code(code)
                .with_protocol_name(if version >= 7 { None } else { Some(s("")) }),
        ),
        RequestKind::SyncGroup(_) => {
            ResponseKind::SyncGroup(SyncGroupResponse::default().with_error_code(code))
        }
        RequestKind::Heartbeat(_) => {
            ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(code))
        }
        RequestKind::LeaveGroup(_) => {
            ResponseKind::LeaveGroup(LeaveGroupResponse::default().with_error_code(code))
        }
        RequestKind::OffsetCommit(r) => ResponseKind::OffsetCommit(
            OffsetCommitResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        OffsetCommitResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_topic_id(t.topic_id)
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        OffsetCommitResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        RequestKind::OffsetFetch(r) => {
            if version >= 8 {
                ResponseKind::OffsetFetch(
                    OffsetFetchResponse::default().with_groups(
                        r.groups
                            .iter()
                            .map(|g| {
                                OffsetFetchResponseGroup::default()
                                    .with_group_id(g.group_id.clone())
                                    .with_error_code(code)
                            })
                            .collect(),
                    ),
                )
            } else {
                ResponseKind::OffsetFetch(OffsetFetchResponse::default().with_error_code(code))
            }
        }
        RequestKind::ConsumerGroupHeartbeat(_) => ResponseKind::ConsumerGroupHeartbeat(
            ConsumerGroupHeartbeatResponse::default().with_error_code(code),
        ),
        RequestKind::FindCoordinator(_) => {
            ResponseKind::FindCoordinator(FindCoordinatorResponse::default().with_error_code(code))
        }
        RequestKind::Metadata(_) => {
            ResponseKind::Metadata(MetadataResponse::default().with_error_code(code))
        }
        _ => ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(code)),
    }
}

/// The first error code an answer carries (top level, else the first per-member / per-partition).
pub fn response_error(body: &ResponseKind) -> i16 {
    fn first(codes: impl Iterator<Item = i16>) -> i16 {
        codes.into_iter().find(|c| *c != 0).unwrap_or(0)
    }
    match body {
        ResponseKind::JoinGroup(r) => r.error_code,
        ResponseKind::SyncGroup(r) => r.error_code,
        ResponseKind::Heartbeat(r) => r.error_code,
        ResponseKind::LeaveGroup(r) if r.error_code != 0 => r.error_code,
        ResponseKind::LeaveGroup(r) => first(r.members.iter().map(|m| m.error_code)),
        ResponseKind::OffsetCommit(r) => first(
            &mut r
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
        ),
        ResponseKind::OffsetFetch(r) if r.error_code != 0 => r.error_code,
        ResponseKind::OffsetFetch(r) => first(r.groups.iter().map(|g| g.error_code)),
        ResponseKind::ConsumerGroupHeartbeat(r) => r.error_code,
        ResponseKind::FindCoordinator(r) if r.error_code != 0 => r.error_code,
        ResponseKind::FindCoordinator(r) => first(r.coordinators.iter().map(|c| c.error_code)),
        ResponseKind::Metadata(r) => r.error_code,
        _ => 0,
    }
}

/// One line describing a request (for traces).
pub fn describe_request(body: &RequestKind) -> String {
    let opt = |o: &Option<StrBytes>| o.as_deref().map_or("-".to_owned(), |x| x.to_owned());
    match body {
        RequestKind::JoinGroup(r) => format!(
            "JoinGroup member={:?} instance={} protocols={}",
            r.member_id.as_str(),
            opt(&r.group_instance_id),
            r.protocols.len()
        ),
        RequestKind::SyncGroup(r) => format!(
            "SyncGroup member={:?} instance={} gen={} assignments={}",
            r.member_id.as_str(),
            opt(&r.group_instance_id),
            r.generation_id,
            r.assignments.len()
        ),
        RequestKind::Heartbeat(r) => format!(
            "Heartbeat member={:?} instance={} gen={}",
            r.member_id.as_str(),
            opt(&r.group_instance_id),
            r.generation_id
        ),
        RequestKind::LeaveGroup(r) => format!(
            "LeaveGroup members={:?}",
            r.members
                .iter()
                .map(|m| m.member_id.to_string())
                .collect::<Vec<_>>()
        ),
        RequestKind::OffsetCommit(r) => format!(
            "OffsetCommit member={:?} gen={} partitions={}",
            r.member_id.as_str(),
            r.generation_id_or_member_epoch,
            r.topics.iter().map(|t| t.partitions.len()).sum::<usize>()
        ),
        RequestKind::OffsetFetch(_) => "OffsetFetch".into(),
        RequestKind::FindCoordinator(_) => "FindCoordinator".into(),
        RequestKind::Metadata(_) => "Metadata".into(),
        RequestKind::ConsumerGroupHeartbeat(r) => format!(
            "ConsumerGroupHeartbeat member={:?} epoch={} instance={}",
            r.member_id.as_str(),
            r.member_epoch,
            opt(&r.instance_id)
        ),
        other => format!("{:?}", api_key_of(other)),
    }
}

/// One line describing an answer (for traces).
pub fn describe_response(body: &ResponseKind) -> String {
    let code = response_error(body);
    let err = name(code);
    match body {
        ResponseKind::JoinGroup(r) if code == 0 => format!(
            "JoinGroup NONE member={:?} gen={} leader={:?} members={}{}",
            r.member_id.as_str(),
            r.generation_id,
            r.leader.as_str(),
            r.members.len(),
            if r.skip_assignment { " skip" } else { "" }
        ),
        ResponseKind::JoinGroup(r) => format!("JoinGroup {err} member={:?}", r.member_id.as_str()),
        ResponseKind::SyncGroup(r) => {
            format!("SyncGroup {err} assignment={}B", r.assignment.len())
        }
        ResponseKind::Heartbeat(_) => format!("Heartbeat {err}"),
        ResponseKind::LeaveGroup(_) => format!("LeaveGroup {err}"),
        ResponseKind::OffsetCommit(_) => format!("OffsetCommit {err}"),
        ResponseKind::OffsetFetch(_) => format!("OffsetFetch {err}"),
        ResponseKind::FindCoordinator(_) => format!("FindCoordinator {err}"),
        ResponseKind::Metadata(_) => format!("Metadata {err}"),
        ResponseKind::ConsumerGroupHeartbeat(r) => {
            format!("ConsumerGroupHeartbeat {err} epoch={}", r.member_epoch)
        }
        _ => format!("answer {err}"),
    }
}

impl fmt::Display for GroupState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}
