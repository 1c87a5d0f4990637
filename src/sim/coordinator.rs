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
//! KIP-848 consumer group rules modelled (`GroupMetadataManager.java`,
//! `modern/consumer/CurrentAssignmentBuilder.java`, `modern/consumer/ConsumerGroup.java`; see
//! [`SimCoordinator`]'s docs): `consumerGroupHeartbeat` with the member lookups
//! (`getOrMaybeSubscribeDynamicConsumerGroupMember`, `getOrMaybeSubscribeStaticConsumerGroupMember`,
//! `throwIfConsumerGroupMemberEpochIsInvalid` with KAFKA-19233, `throwIfInstanceIdIsUnreleased`,
//! `throwIfInstanceIdIsFenced`, `throwIfStaticMemberIsUnknown`, `replaceMember`), the group epoch
//! and target assignment (`hasMemberSubscriptionChanged`, `updateTargetAssignment`), the
//! reconciliation with its revocation phase (`maybeReconcile`, `CurrentAssignmentBuilder.build` /
//! `computeNextAssignment` / `ownsRevokedPartitions`, `ConsumerGroup.currentPartitionEpoch`),
//! leaves (`consumerGroupLeave`, `consumerGroupStaticMemberGroupLeave`,
//! `consumerGroupFenceMember`) and timers (`scheduleConsumerGroupSessionTimeout`,
//! `scheduleConsumerGroupRebalanceTimeout`).
//!
//! Simplified: one group per coordinator (other group ids get NOT_COORDINATOR); appends never
//! fail; no group deletion (`Dead`) and no coordinator failover; a request to a group that does
//! not exist yet with a member id is answered UNKNOWN_MEMBER_ID for every API (the new
//! coordinator answers some with GROUP_ID_NOT_FOUND); the target assignment of a KIP-848 group
//! is a round-robin over partitions (not the `uniform` / `range` assignors), computed by the
//! first heartbeat after the group epoch moved (no assignment interval, no offloading); regular
//! expression subscriptions, the 4.3+ per-partition assignment epochs and online migration
//! between classic and consumer groups are not modelled.

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
use crate::request::api_key_of;

/// `LEAVE_GROUP_STATIC_MEMBER_EPOCH`.
const STATIC_LEAVE_EPOCH: i32 = -2;

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

/// A partition of a KIP-848 group: topic name and partition index.
type Tp = (String, i32);

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

/// `MemberState` of a KIP-848 member (apache/kafka `modern/MemberState.java`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CgState {
    /// Reconciled to its epoch's assignment, or nothing to wait for.
    Stable,
    /// Waiting for the member to acknowledge (by leaving them out of its owned partitions) the
    /// revocation of `pending_revocation`; the member stays in its epoch meanwhile.
    UnrevokedPartitions,
    /// In the target epoch, waiting for partitions other members still hold.
    UnreleasedPartitions,
}

impl CgState {
    fn name(self) -> &'static str {
        match self {
            CgState::Stable => "STABLE",
            CgState::UnrevokedPartitions => "UNREVOKED_PARTITIONS",
            CgState::UnreleasedPartitions => "UNRELEASED_PARTITIONS",
        }
    }
}

/// A KIP-848 member (`ConsumerGroupMember`), reduced to what membership and the reconciliation
/// need.
#[derive(Debug, Clone, PartialEq)]
struct ConsumerMemberState {
    instance_id: Option<String>,
    epoch: i32,
    previous_epoch: i32,
    state: CgState,
    topics: Vec<String>,
    rebalance_timeout_ms: i32,
    /// `assignedPartitions`: what the member owns (or may own) in its epoch.
    assigned: BTreeSet<Tp>,
    /// `partitionsPendingRevocation`: still owned by the member until it acknowledges.
    pending_revocation: BTreeSet<Tp>,
}

impl ConsumerMemberState {
    /// `ConsumerGroup.getOrMaybeCreateMember`: a new member, epoch 0, STABLE, nothing assigned.
    fn new() -> Self {
        Self {
            instance_id: None,
            epoch: 0,
            previous_epoch: 0,
            state: CgState::Stable,
            topics: Vec::new(),
            rebalance_timeout_ms: -1,
            assigned: BTreeSet::new(),
            pending_revocation: BTreeSet::new(),
        }
    }

    /// `ModernGroupMember.isReconciledTo`.
    fn is_reconciled_to(&self, target_epoch: i32) -> bool {
        self.state == CgState::Stable && self.epoch == target_epoch
    }

    /// `ConsumerGroupMember.Builder.updateMemberEpoch`: the previous epoch becomes the current one.
    fn update_epoch(&mut self, epoch: i32) {
        self.previous_epoch = self.epoch;
        self.epoch = epoch;
    }
}

/// One member's share of a topic in the round-robin target: the topic's partitions `p` with
/// `p % takers == rank` (the member is the `rank`-th of the `takers` members subscribed to it,
/// in member-id order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Share {
    /// Index into [`ConsumerGroup::topic_table`].
    topic: u32,
    rank: u32,
    takers: u32,
}

/// A KIP-848 group (`ConsumerGroup`), reduced.
///
/// Members' assigned and pending-revocation partitions change only through
/// [`put_member`](Self::put_member), [`take_member`](Self::take_member),
/// [`remove_member`](Self::remove_member) and [`static_leave`](Self::static_leave), which keep
/// the partition index (`held`) and the set of changed members (`changed`) up to date.
#[derive(Debug, Clone, Default)]
struct ConsumerGroup {
    /// The group epoch (`groupEpoch`), bumped when the membership or a subscription changes.
    epoch: i32,
    /// The target assignment's epoch (`assignmentEpoch`); behind `epoch` until the next
    /// heartbeat recomputes the target.
    assignment_epoch: i32,
    /// The target assignment, by member id (`targetAssignment`), as each member's shares of
    /// the round robin ([`Self::target_of`] lists the partitions).
    target: BTreeMap<String, Vec<Share>>,
    /// The topics (name, partition count) the target's shares refer to, by name.
    topic_table: Vec<(String, i32)>,
    members: BTreeMap<String, ConsumerMemberState>,
    static_members: BTreeMap<String, String>,
    /// `ConsumerGroup.partitionEpochs`, reduced to a count: for each partition, how many
    /// (member, assigned or pending revocation) entries hold it. Above 1 only when the
    /// coordinator's invariants are broken.
    held: BTreeMap<Tp, u32>,
    /// Members whose state changed since [`SimCoordinator::take_changed_consumer_members`].
    changed: BTreeSet<String>,
}

impl ConsumerGroup {
    /// `ConsumerGroup.currentPartitionEpoch != -1`: whether any member holds the partition
    /// (assigned or pending revocation, at any epoch including -2).
    fn is_held(&self, tp: &Tp) -> bool {
        self.held.get(tp).is_some_and(|n| *n > 0)
    }

    /// Counts (`add`) or uncounts the partitions `m` holds in [`Self::held`].
    fn count_held(&mut self, m: &ConsumerMemberState, add: bool) {
        for tp in m.assigned.iter().chain(&m.pending_revocation) {
            if add {
                *self.held.entry(tp.clone()).or_default() += 1;
            } else if let Some(n) = self.held.get_mut(tp) {
                *n -= 1;
                if *n == 0 {
                    self.held.remove(tp);
                }
            }
        }
    }

    /// Stores the member's new state (`members.put`).
    fn put_member(&mut self, member_id: &str, m: ConsumerMemberState) {
        if let Some(old) = self.members.remove(member_id) {
            self.count_held(&old, false);
        }
        self.count_held(&m, true);
        self.members.insert(member_id.to_owned(), m);
        self.changed.insert(member_id.to_owned());
    }

    /// Takes the member out of `members` (its target and instance id left as they are).
    fn take_member(&mut self, member_id: &str) -> Option<ConsumerMemberState> {
        let m = self.members.remove(member_id)?;
        self.count_held(&m, false);
        self.changed.insert(member_id.to_owned());
        Some(m)
    }

    /// `removeMember` (tombstones for the member, its target and current assignment).
    fn remove_member(&mut self, member_id: &str) -> Option<ConsumerMemberState> {
        let m = self.take_member(member_id)?;
        self.target.remove(member_id);
        if let Some(i) = &m.instance_id
            && self.static_members.get(i).map(String::as_str) == Some(member_id)
        {
            self.static_members.remove(i);
        }
        Some(m)
    }

    /// `consumerGroupStaticMemberGroupLeave`'s member update: epoch -2, pending revocations
    /// dropped, the assignment kept.
    fn static_leave(&mut self, member_id: &str) {
        let Some(mut m) = self.members.get(member_id).cloned() else {
            return;
        };
        m.epoch = STATIC_LEAVE_EPOCH;
        m.pending_revocation.clear();
        self.put_member(member_id, m);
    }

    /// The member's target partitions (`None` when the target has no entry for it).
    fn target_of(&self, member_id: &str) -> Option<BTreeSet<Tp>> {
        let shares = self.target.get(member_id)?;
        let mut out = BTreeSet::new();
        for s in shares {
            let (topic, count) = &self.topic_table[s.topic as usize];
            let mut p = s.rank as i32;
            while p < *count {
                out.insert((topic.clone(), p));
                p += s.takers as i32;
            }
        }
        Some(out)
    }
}

/// A KIP-848 member as the coordinator sees it (for invariants and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerMemberView {
    /// The member id.
    pub member_id: String,
    /// The instance id of a static member.
    pub instance_id: Option<String>,
    /// The member epoch (-2 after a static member's temporary leave).
    pub epoch: i32,
    /// The previous member epoch.
    pub previous_epoch: i32,
    /// `STABLE`, `UNREVOKED_PARTITIONS` or `UNRELEASED_PARTITIONS`.
    pub state: &'static str,
    /// The assigned partitions (topic, partition).
    pub assigned: Vec<(String, i32)>,
    /// The partitions the member must still acknowledge as revoked.
    pub pending_revocation: Vec<(String, i32)>,
    /// The member's target assignment.
    pub target: Vec<(String, i32)>,
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
///   reused on epoch 0 since KAFKA-19233, else UNKNOWN_MEMBER_ID / the epoch check
///   `throwIfConsumerGroupMemberEpochIsInvalid`, which accepts the previous epoch only with owned
///   partitions that are a subset of the assignment) or static
///   (`getOrMaybeSubscribeStaticConsumerGroupMember`: epoch 0 with the instance held by a member
///   whose epoch is not -2 ⇒ UNRELEASED_INSTANCE_ID even for the same member id, else the new
///   member id replaces the old one and inherits its assignment with epochs reset to 0
///   (`replaceMember`); other epochs: unknown instance ⇒ UNKNOWN_MEMBER_ID, instance held by
///   another member id ⇒ FENCED_INSTANCE_ID);
/// - the group epoch is bumped when a subscription changes (`hasMemberSubscriptionChanged`) or a
///   member is fenced (`consumerGroupFenceMember`); the next heartbeat of any member recomputes
///   the target assignment (`updateTargetAssignment`, here a round-robin over the members in
///   member-id order, -2 members included: their partitions stay reserved);
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
    heartbeats: Timers<()>,
    consumer_sessions: Timers<()>,
    /// `consumerGroupRebalanceTimeoutKey`: deadline and the epoch the member must leave.
    consumer_rebalance_timeouts: Timers<i32>,
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
            heartbeats: Timers::new(),
            consumer_sessions: Timers::new(),
            consumer_rebalance_timeouts: Timers::new(),
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

    /// The KIP-848 group's members with their reconciliation state (empty without a consumer
    /// group).
    pub fn consumer_members(&self) -> Vec<ConsumerMemberView> {
        let Some(c) = &self.consumer else {
            return Vec::new();
        };
        c.members
            .iter()
            .map(|(id, m)| ConsumerMemberView {
                member_id: id.clone(),
                instance_id: m.instance_id.clone(),
                epoch: m.epoch,
                previous_epoch: m.previous_epoch,
                state: m.state.name(),
                assigned: m.assigned.iter().cloned().collect(),
                pending_revocation: m.pending_revocation.iter().cloned().collect(),
                target: c
                    .target_of(id)
                    .map(|t| t.into_iter().collect())
                    .unwrap_or_default(),
            })
            .collect()
    }

    /// Whether the KIP-848 group holds `member_id` (`None` when it is not a member) with the
    /// partition assigned or pending revocation.
    pub fn consumer_member_holds(
        &self,
        member_id: &str,
        topic: &str,
        partition: i32,
    ) -> Option<bool> {
        let m = self.consumer.as_ref()?.members.get(member_id)?;
        Some(
            m.assigned
                .iter()
                .chain(&m.pending_revocation)
                .any(|(t, p)| t == topic && *p == partition),
        )
    }

    /// The KIP-848 group's epoch and its target assignment's epoch (`None` without a consumer
    /// group).
    pub fn consumer_epochs(&self) -> Option<(i32, i32)> {
        self.consumer
            .as_ref()
            .map(|c| (c.epoch, c.assignment_epoch))
    }

    /// Broken invariants of the coordinator's own state, as the broker enforces them
    /// (`ConsumerGroup.addPartitionEpochs` throws when a partition would be held by two members;
    /// member epochs never exceed the target assignment's epoch, which never exceeds the group
    /// epoch; the instance-id map points at members that carry that instance id).
    pub fn check_invariants(&self) -> Vec<String> {
        let mut out = Vec::new();
        let Some(c) = &self.consumer else {
            return out;
        };
        let mut holders: BTreeMap<&Tp, &str> = BTreeMap::new();
        for (id, m) in &c.members {
            for tp in m.assigned.iter().chain(&m.pending_revocation) {
                if let Some(other) = holders.insert(tp, id) {
                    out.push(format!(
                        "coordinator: {}-{} held by both {other} and {id}",
                        tp.0, tp.1
                    ));
                }
            }
            if m.epoch > c.assignment_epoch {
                out.push(format!(
                    "coordinator: member {id} epoch {} above the assignment epoch {}",
                    m.epoch, c.assignment_epoch
                ));
            }
        }
        let mut counts: BTreeMap<&Tp, u32> = BTreeMap::new();
        for m in c.members.values() {
            for tp in m.assigned.iter().chain(&m.pending_revocation) {
                *counts.entry(tp).or_default() += 1;
            }
        }
        if counts.len() != c.held.len() || counts.iter().any(|(tp, n)| c.held.get(*tp) != Some(n)) {
            out.push(
                "coordinator: the partition index differs from the members' partitions".into(),
            );
        }
        Self::check_group_invariants(c, &mut out);
        out
    }

    /// The group-wide part of [`Self::check_invariants`].
    fn check_group_invariants(c: &ConsumerGroup, out: &mut Vec<String>) {
        if c.assignment_epoch > c.epoch {
            out.push(format!(
                "coordinator: assignment epoch {} above the group epoch {}",
                c.assignment_epoch, c.epoch
            ));
        }
        for (inst, id) in &c.static_members {
            if c.members.get(id).and_then(|m| m.instance_id.as_deref()) != Some(inst.as_str()) {
                out.push(format!(
                    "coordinator: instance {inst} maps to {id}, which does not carry it"
                ));
            }
        }
    }

    /// The KIP-848 members whose state (epoch, assigned or pending partitions, membership)
    /// changed since the last call.
    pub(crate) fn take_changed_consumer_members(&mut self) -> BTreeSet<String> {
        self.consumer
            .as_mut()
            .map(|c| std::mem::take(&mut c.changed))
            .unwrap_or_default()
    }

    /// [`Self::check_invariants`] for a step that changed only the `changed` members (the same
    /// messages, for the breaches those members are part of): the cost is in the changed
    /// members, not the group's size. The assignment epoch only grows, so a member whose epoch
    /// did not change cannot newly exceed it.
    pub(crate) fn check_invariants_of(&self, changed: &BTreeSet<String>) -> Vec<String> {
        let mut out = Vec::new();
        let Some(c) = &self.consumer else {
            return out;
        };
        for id in changed {
            let Some(m) = c.members.get(id) else {
                continue;
            };
            for tp in m.assigned.iter().chain(&m.pending_revocation) {
                if c.held.get(tp).is_some_and(|n| *n > 1) {
                    // The holders in the order the full check meets them.
                    let holders: Vec<&str> = c
                        .members
                        .iter()
                        .flat_map(|(id, m)| {
                            m.assigned
                                .iter()
                                .chain(&m.pending_revocation)
                                .filter(|x| *x == tp)
                                .map(move |_| id.as_str())
                        })
                        .collect();
                    for pair in holders.windows(2) {
                        out.push(format!(
                            "coordinator: {}-{} held by both {} and {}",
                            tp.0, tp.1, pair[0], pair[1]
                        ));
                    }
                }
            }
            if m.epoch > c.assignment_epoch {
                out.push(format!(
                    "coordinator: member {id} epoch {} above the assignment epoch {}",
                    m.epoch, c.assignment_epoch
                ));
            }
        }
        Self::check_group_invariants(c, &mut out);
        out
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
        for (id, ()) in self.heartbeats.due(now) {
            self.heartbeats.remove(&id);
            self.expire_heartbeat(&id);
        }
        for (id, ()) in self.consumer_sessions.due(now) {
            self.consumer_sessions.remove(&id);
            self.consumer_session_expired(&id);
        }
        for (id, epoch) in self.consumer_rebalance_timeouts.due(now) {
            self.consumer_rebalance_timeouts.remove(&id);
            self.consumer_rebalance_timeout_expired(&id, epoch);
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
                self.heartbeats.insert(new_id.clone(), at, ());
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
            .insert(member_id.to_owned(), self.now + timeout, ());
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

    /// The topic named by `id` (the simulation's topic ids are hashes of the names); ids of
    /// unknown topics keep a placeholder name, so they still count in subset checks.
    fn topic_name(&self, id: uuid::Uuid) -> String {
        self.config
            .topics
            .iter()
            .find(|(n, _)| topic_id(n) == id)
            .map_or_else(|| format!("?{id}"), |(n, _)| n.clone())
    }

    /// The request's `TopicPartitions` (the partitions the member owns), `None` when left out.
    fn owned_partitions(&self, r: &ConsumerGroupHeartbeatRequest) -> Option<BTreeSet<Tp>> {
        r.topic_partitions.as_ref().map(|tps| {
            tps.iter()
                .flat_map(|t| {
                    let name = self.topic_name(t.topic_id);
                    t.partitions.iter().map(move |p| (name.clone(), *p))
                })
                .collect()
        })
    }

    /// `GroupMetadataManager.consumerGroupHeartbeat` (see the type's docs for the steps).
    fn consumer_heartbeat(&mut self, p: Parked, r: ConsumerGroupHeartbeatRequest) {
        let member_id = r.member_id.to_string();
        let epoch = r.member_epoch;
        let instance = r.instance_id.as_ref().map(|i| i.to_string());
        // GroupCoordinatorService.throwIfConsumerGroupHeartbeatRequestIsInvalid.
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
        // getOrMaybeCreateConsumerGroup: created only on epoch 0.
        if self.consumer.is_none() {
            if epoch != 0 {
                return self.reply(p, Self::cgh_error(GROUP_ID_NOT_FOUND));
            }
            self.classic = None;
            self.consumer = Some(ConsumerGroup::default());
        }
        if epoch == -1 || epoch == -2 {
            return self.consumer_group_leave(p, &member_id, instance.as_deref(), epoch);
        }
        let owned = self.owned_partitions(&r);
        let member = match instance.as_deref() {
            None => self.get_or_subscribe_dynamic_member(&member_id, epoch, owned.as_ref()),
            Some(inst) => {
                self.get_or_subscribe_static_member(&member_id, epoch, inst, owned.as_ref())
            }
        };
        let before = match member {
            Ok(m) => m,
            Err(code) => return self.reply(p, Self::cgh_error(code)),
        };
        // 1. The member's new fields (ConsumerGroupMember.Builder.maybeUpdate*); a changed
        // subscription bumps the group epoch (hasMemberSubscriptionChanged).
        let topics: Option<Vec<String>> = r.subscribed_topic_names.as_ref().map(|ts| {
            let set: BTreeSet<String> = ts.iter().map(|t| t.to_string()).collect();
            set.into_iter().collect()
        });
        let c = self.consumer.as_mut().expect("created");
        let m = c.members.get_mut(&member_id).expect("member exists");
        if let Some(i) = &instance {
            m.instance_id = Some(i.clone());
        }
        if r.rebalance_timeout_ms != -1 {
            m.rebalance_timeout_ms = r.rebalance_timeout_ms;
        }
        let mut bump = false;
        if let Some(t) = topics
            && t != m.topics
        {
            m.topics = t;
            bump = true;
        }
        if let Some(i) = &instance {
            // ConsumerGroup.updateStaticMember.
            c.static_members.insert(i.clone(), member_id.clone());
        }
        if bump {
            c.epoch += 1;
            let e = c.epoch;
            self.note(|| format!("{member_id}: subscription changed: group epoch bumped to {e}"));
        }
        // 2. updateTargetAssignment when the group epoch is ahead of the target's.
        let c = self.consumer.as_ref().expect("created");
        if c.epoch > c.assignment_epoch {
            self.update_target_assignment();
        }
        // 3. maybeReconcile.
        self.maybe_reconcile(&member_id, owned.as_ref());
        // scheduleConsumerGroupSessionTimeout.
        let session = self.config.consumer_session_timeout;
        self.consumer_sessions
            .insert(member_id.clone(), self.now + session, ());
        let c = self.consumer.as_ref().expect("created");
        let m = &c.members[&member_id];
        // The assignment goes out on full requests (epoch 0, or every non-optional field set)
        // and whenever the assigned partitions changed.
        let full = epoch == 0
            || (r.rebalance_timeout_ms != -1
                && (r.subscribed_topic_names.is_some() || r.subscribed_topic_regex.is_some())
                && r.topic_partitions.is_some());
        let assignment = (full || m.assigned != before.assigned).then(|| {
            let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for (t, i) in &m.assigned {
                by_topic.entry(t.as_str()).or_default().push(*i);
            }
            CghAssignment::default().with_topic_partitions(
                by_topic
                    .into_iter()
                    .map(|(t, ps)| {
                        CghTopicPartitions::default()
                            .with_topic_id(topic_id(t))
                            .with_partitions(ps)
                    })
                    .collect(),
            )
        });
        let body = ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(s(&member_id)))
            .with_member_epoch(m.epoch)
            .with_heartbeat_interval_ms(ms(self.config.consumer_heartbeat_interval))
            .with_assignment(assignment);
        self.reply(p, ResponseKind::ConsumerGroupHeartbeat(body));
    }

    /// `getOrMaybeSubscribeDynamicConsumerGroupMember`: the member as it was before this
    /// heartbeat (created on epoch 0), or the error.
    fn get_or_subscribe_dynamic_member(
        &mut self,
        member_id: &str,
        epoch: i32,
        owned: Option<&BTreeSet<Tp>>,
    ) -> Result<ConsumerMemberState, i16> {
        let c = self.consumer.as_mut().expect("created");
        match c.members.get(member_id) {
            None if epoch == 0 => {
                let m = ConsumerMemberState::new();
                c.put_member(member_id, m.clone());
                self.note(|| format!("{member_id} joins the consumer group"));
                Ok(m)
            }
            None => {
                self.note(|| format!("{member_id} epoch {epoch}: unknown member"));
                Err(UNKNOWN_MEMBER_ID)
            }
            Some(m) => {
                let m = m.clone();
                self.check_member_epoch(member_id, &m, epoch, owned)?;
                Ok(m)
            }
        }
    }

    /// `getOrMaybeSubscribeStaticConsumerGroupMember`.
    fn get_or_subscribe_static_member(
        &mut self,
        member_id: &str,
        epoch: i32,
        instance: &str,
        owned: Option<&BTreeSet<Tp>>,
    ) -> Result<ConsumerMemberState, i16> {
        let c = self.consumer.as_mut().expect("created");
        let existing = c.static_members.get(instance).cloned();
        if epoch == 0 {
            let Some(old_id) = existing else {
                // A new static member (or a known member id taking an instance id).
                let m = match c.members.get(member_id) {
                    Some(m) => m.clone(),
                    None => {
                        let m = ConsumerMemberState::new();
                        c.put_member(member_id, m.clone());
                        m
                    }
                };
                self.note(|| format!("static member {member_id} ({instance}) joins"));
                return Ok(m);
            };
            let old = c.members[&old_id].clone();
            if old.epoch != STATIC_LEAVE_EPOCH {
                // throwIfInstanceIdIsUnreleased: even when the member id is the same.
                self.note(|| {
                    format!(
                        "epoch-0 join of {member_id} for instance {instance} held by {old_id} (epoch {}): UNRELEASED_INSTANCE_ID",
                        old.epoch
                    )
                });
                return Err(UNRELEASED_INSTANCE_ID);
            }
            // replaceMember: the new member id takes over the old member (its subscription,
            // assignment and target), epochs reset to 0.
            let mut new = old;
            new.epoch = 0;
            new.previous_epoch = 0;
            let target = c.target.remove(&old_id);
            c.take_member(&old_id);
            if let Some(t) = target {
                c.target.insert(member_id.to_owned(), t);
            }
            c.put_member(member_id, new.clone());
            c.static_members
                .insert(instance.to_owned(), member_id.to_owned());
            if old_id != member_id {
                // The old member's timers are not cancelled by replaceMember, but they find no
                // member when they fire: dropping them here is the same.
                self.consumer_sessions.remove(&old_id);
                self.consumer_rebalance_timeouts.remove(&old_id);
            }
            self.note(|| {
                format!("static member {member_id} replaces {old_id} (left with -2) for {instance}")
            });
            return Ok(new);
        }
        // throwIfStaticMemberIsUnknown, throwIfInstanceIdIsFenced, then the epoch check.
        let Some(existing) = existing else {
            self.note(|| format!("{member_id} epoch {epoch}: instance {instance} unknown"));
            return Err(UNKNOWN_MEMBER_ID);
        };
        if existing != member_id {
            self.note(|| {
                format!("{member_id}: instance {instance} held by {existing}: FENCED_INSTANCE_ID")
            });
            return Err(FENCED_INSTANCE_ID);
        }
        let m = c.members[&existing].clone();
        self.check_member_epoch(member_id, &m, epoch, owned)?;
        Ok(m)
    }

    /// `throwIfConsumerGroupMemberEpochIsInvalid`; epoch 0 always passes (KAFKA-19233).
    fn check_member_epoch(
        &mut self,
        member_id: &str,
        m: &ConsumerMemberState,
        epoch: i32,
        owned: Option<&BTreeSet<Tp>>,
    ) -> Result<(), i16> {
        if epoch == 0 {
            return Ok(());
        }
        // The previous epoch is accepted (the answer with the bump may have been lost) only
        // when the owned partitions are a subset of the assignment (isSubset: null is not).
        let subset = owned.is_some_and(|o| o.is_subset(&m.assigned));
        if epoch > m.epoch || (epoch < m.epoch && (epoch != m.previous_epoch || !subset)) {
            let (current, previous) = (m.epoch, m.previous_epoch);
            self.note(|| {
                format!(
                    "{member_id} epoch {epoch} vs {current} (previous {previous}, owned subset {subset}): FENCED_MEMBER_EPOCH"
                )
            });
            return Err(FENCED_MEMBER_EPOCH);
        }
        Ok(())
    }

    /// `consumerGroupLeave`.
    fn consumer_group_leave(
        &mut self,
        p: Parked,
        member_id: &str,
        instance: Option<&str>,
        epoch: i32,
    ) {
        let c = self.consumer.as_mut().expect("created");
        let code = match instance {
            None if !c.members.contains_key(member_id) => Some(UNKNOWN_MEMBER_ID),
            None => None,
            Some(inst) => match c.static_members.get(inst) {
                None => Some(UNKNOWN_MEMBER_ID),
                Some(id) if id != member_id => Some(FENCED_INSTANCE_ID),
                Some(_) => None,
            },
        };
        if let Some(code) = code {
            self.note(|| {
                format!(
                    "leave {epoch} of {member_id} ({instance:?}): {}",
                    name(code)
                )
            });
            return self.reply(p, Self::cgh_error(code));
        }
        if epoch == STATIC_LEAVE_EPOCH {
            // consumerGroupStaticMemberGroupLeave: kept with epoch -2 and its assignment (the
            // partitions stay reserved for its return); pending revocations are dropped; no
            // group epoch bump.
            c.static_leave(member_id);
            self.note(|| format!("leave -2: static member {member_id} kept with epoch -2"));
        } else {
            self.note(|| format!("leave -1: {member_id} left"));
            self.consumer_group_fence_member(member_id);
        }
        let body = ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(s(member_id)))
            .with_member_epoch(epoch);
        self.reply(p, ResponseKind::ConsumerGroupHeartbeat(body));
    }

    /// `consumerGroupFenceMember`: removes the member (its partitions become free) and bumps
    /// the group epoch; the target is recomputed by the next heartbeat.
    fn consumer_group_fence_member(&mut self, member_id: &str) -> bool {
        let c = self.consumer.as_mut().expect("consumer group");
        if c.remove_member(member_id).is_none() {
            return false;
        }
        c.epoch += 1;
        let e = c.epoch;
        // cancelTimers.
        self.consumer_sessions.remove(member_id);
        self.consumer_rebalance_timeouts.remove(member_id);
        self.note(|| format!("{member_id} removed: group epoch bumped to {e}"));
        true
    }

    /// `updateTargetAssignment`: a round-robin over the subscribed members in member-id order
    /// (members that left with -2 included), at the group epoch: partition `i` of a topic goes
    /// to the `i % n`-th of the `n` members subscribed to it. Kept as each member's share (rank
    /// and member count per topic), updated in place: one pass over the members, no
    /// per-partition work.
    fn update_target_assignment(&mut self) {
        let table: Vec<(String, i32)> = self
            .config
            .topics
            .iter()
            .cloned()
            .collect::<BTreeMap<String, i32>>()
            .into_iter()
            .collect();
        let c = self.consumer.as_mut().expect("consumer group");
        let ConsumerGroup {
            members,
            target,
            topic_table,
            ..
        } = c;
        if *topic_table != table {
            *topic_table = table;
        }
        let index = |t: &str| -> Option<u32> {
            topic_table
                .binary_search_by(|(n, _)| n.as_str().cmp(t))
                .ok()
                .map(|i| i as u32)
        };
        let mut takers = vec![0u32; topic_table.len()];
        for m in members.values() {
            for t in &m.topics {
                if let Some(i) = index(t) {
                    takers[i as usize] += 1;
                }
            }
        }
        let mut rank = vec![0u32; topic_table.len()];
        let mut shares_of = |m: &ConsumerMemberState, out: &mut Vec<Share>| {
            out.clear();
            for t in &m.topics {
                if let Some(i) = index(t) {
                    let r = &mut rank[i as usize];
                    out.push(Share {
                        topic: i,
                        rank: *r,
                        takers: takers[i as usize],
                    });
                    *r += 1;
                }
            }
        };
        // Merge the members (by id) into the target (by id): update, add, drop.
        let mut added: Vec<(String, Vec<Share>)> = Vec::new();
        let mut gone: Vec<String> = Vec::new();
        let mut entries = target.iter_mut().peekable();
        for (id, m) in members.iter() {
            while let Some((k, _)) = entries.peek() {
                if k.as_str() < id.as_str() {
                    gone.push((*k).clone());
                    entries.next();
                } else {
                    break;
                }
            }
            match entries.peek_mut() {
                Some((k, v)) if k.as_str() == id.as_str() => {
                    shares_of(m, v);
                    entries.next();
                }
                _ => {
                    let mut v = Vec::new();
                    shares_of(m, &mut v);
                    added.push((id.clone(), v));
                }
            }
        }
        gone.extend(entries.map(|(k, _)| k.clone()));
        for k in gone {
            target.remove(&k);
        }
        target.extend(added);
        c.assignment_epoch = c.epoch;
        let e = c.epoch;
        self.note(|| format!("target assignment computed for epoch {e}"));
    }

    /// `maybeReconcile`: moves the member towards its target (`CurrentAssignmentBuilder`) and
    /// schedules the rebalance timeout while it has partitions to revoke (cancels it otherwise).
    fn maybe_reconcile(&mut self, member_id: &str, owned: Option<&BTreeSet<Tp>>) {
        let c = self.consumer.as_mut().expect("consumer group");
        let target_epoch = c.assignment_epoch;
        let m = &c.members[member_id];
        if m.is_reconciled_to(target_epoch) {
            return;
        }
        let next = current_assignment_builder(c, member_id, target_epoch, owned);
        if next == c.members[member_id] {
            return;
        }
        let (state, epoch, timeout) = (next.state, next.epoch, next.rebalance_timeout_ms);
        let summary = if self.notes_enabled {
            format!(
                "{member_id}: {} epoch {} assigned {} pending revocation {}",
                state.name(),
                epoch,
                fmt_tps(&next.assigned),
                fmt_tps(&next.pending_revocation)
            )
        } else {
            String::new()
        };
        c.put_member(member_id, next);
        self.note(|| summary);
        if state == CgState::UnrevokedPartitions && timeout >= 0 {
            let at = self.now + Duration::from_millis(timeout as u64);
            self.consumer_rebalance_timeouts
                .insert(member_id.to_owned(), at, epoch);
        } else {
            self.consumer_rebalance_timeouts.remove(member_id);
        }
    }

    /// `scheduleConsumerGroupRebalanceTimeout`'s callback: a member still in the epoch it had to
    /// leave by revoking partitions is fenced.
    fn consumer_rebalance_timeout_expired(&mut self, member_id: &str, epoch: i32) {
        let still = self
            .consumer
            .as_ref()
            .and_then(|c| c.members.get(member_id))
            .is_some_and(|m| m.epoch == epoch);
        if still {
            self.note(|| {
                format!("{member_id} failed to transition from epoch {epoch} within the rebalance timeout")
            });
            self.consumer_group_fence_member(member_id);
        }
    }

    /// `scheduleConsumerGroupSessionTimeout`'s callback (`consumerGroupFenceMemberOperation`).
    fn consumer_session_expired(&mut self, member_id: &str) {
        if self.consumer.is_some() && self.consumer_group_fence_member(member_id) {
            self.note(|| format!("consumer member {member_id} session expired"));
        }
    }
}

/// `CurrentAssignmentBuilder.build`: the member's next state.
fn current_assignment_builder(
    c: &ConsumerGroup,
    member_id: &str,
    target_epoch: i32,
    owned: Option<&BTreeSet<Tp>>,
) -> ConsumerMemberState {
    let m = &c.members[member_id];
    match m.state {
        CgState::Stable if m.epoch == target_epoch => m.clone(),
        CgState::UnrevokedPartitions if owns_revoked(owned, &m.pending_revocation) => m.clone(),
        _ => compute_next_assignment(c, member_id, target_epoch, owned),
    }
}

/// `CurrentAssignmentBuilder.ownsRevokedPartitions`: without owned partitions in the request the
/// member is assumed to still own them.
fn owns_revoked(owned: Option<&BTreeSet<Tp>>, revoked: &BTreeSet<Tp>) -> bool {
    owned.is_none_or(|o| o.iter().any(|tp| revoked.contains(tp)))
}

/// `CurrentAssignmentBuilder.computeNextAssignment`: keep what is still targeted; what is not
/// goes to pending revocation (the member stays in its epoch until it acknowledges); targeted
/// partitions no other member holds are added and the member moves to the target epoch;
/// targeted partitions still held elsewhere wait (UNRELEASED_PARTITIONS).
fn compute_next_assignment(
    c: &ConsumerGroup,
    member_id: &str,
    target_epoch: i32,
    owned: Option<&BTreeSet<Tp>>,
) -> ConsumerMemberState {
    let m = &c.members[member_id];
    // Topics the member no longer subscribes to count as an empty target.
    let mut target: BTreeSet<Tp> = c.target_of(member_id).unwrap_or_default();
    target.retain(|(t, _)| m.topics.contains(t));
    let assigned: BTreeSet<Tp> = m.assigned.intersection(&target).cloned().collect();
    let revoke: BTreeSet<Tp> = m.assigned.difference(&assigned).cloned().collect();
    let mut unreleased = false;
    let mut add = BTreeSet::new();
    for tp in target.difference(&assigned) {
        // A partition this member still holds as pending revocation is not "unreleased"; `tp` is
        // not among its assigned partitions, so any other holder is another member.
        if !m.pending_revocation.contains(tp) && c.is_held(tp) {
            unreleased = true;
        } else {
            add.insert(tp.clone());
        }
    }
    let mut next = m.clone();
    if !revoke.is_empty() && owns_revoked(owned, &revoke) {
        next.state = CgState::UnrevokedPartitions;
        next.update_epoch(m.epoch);
        next.assigned = assigned;
        next.pending_revocation = revoke;
    } else {
        next.state = if unreleased {
            CgState::UnreleasedPartitions
        } else {
            CgState::Stable
        };
        next.update_epoch(target_epoch);
        next.assigned = assigned.union(&add).cloned().collect();
        next.pending_revocation = BTreeSet::new();
    }
    next
}

fn fmt_tps(tps: &BTreeSet<Tp>) -> String {
    let v: Vec<String> = tps.iter().map(|(t, p)| format!("{t}-{p}")).collect();
    format!("[{}]", v.join(","))
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
