//! Streams groups (KIP-1071): the rules of Kafka 4.4's group coordinator for
//! `StreamsGroupHeartbeat` (API key 88) and `StreamsGroupDescribe` (89), as a pure, seeded,
//! deterministic model (no clock reads: time is the `Instant` passed in).
//!
//! Modelled (apache/kafka `group-coordinator`, each branch naming its `Class.method`):
//! - request validation (`GroupCoordinatorService.throwIfStreamsGroupHeartbeatRequestIsInvalid`,
//!   `throwIfStreamsGroupHeartbeatRequestIsUsingUnsupportedFeatures`, `throwIfInvalidTopology`);
//! - joins, heartbeats and leaves (`GroupMetadataManager.streamsGroupHeartbeat`,
//!   `getOrMaybeCreateDynamicStreamsGroupMember`, `getOrMaybeCreateStaticStreamsGroupMember`,
//!   `throwIfStreamsGroupMemberEpochIsInvalid`, `throwIfInstanceIdIsUnreleased`,
//!   `throwIfInstanceIdIsFenced`, `throwIfStaticMemberIsUnknown`, `replaceStreamsMember`,
//!   `streamsGroupLeave`, `streamsGroupStaticMemberGroupLeave`, `streamsGroupFenceMember`);
//! - the topology, its configuration against the topics that exist and the statuses it yields
//!   (`maybeUpdateTopology`, `maybeSetTopologyStaleStatus`, `topology`: `InternalTopicManager`);
//! - the group epoch, the target assignment with the `sticky` assignor (`assignor`) and the
//!   reconciliation (`reconcile`: `CurrentAssignmentBuilder`) against the task ownership index
//!   (`group`: `StreamsGroup.currentActiveTaskProcessId` and friends), in the broker's
//!   per-process form ([`OwnershipIndex::PerProcess`], KAFKA-21401) or per member
//!   ([`OwnershipIndex::PerMember`]);
//! - endpoint information (`StreamsGroup.buildEndpointToPartitions`,
//!   `EndpointToPartitionsManager`), session and rebalance timeouts
//!   (`scheduleStreamsGroupSessionTimeout`, `scheduleStreamsGroupRebalanceTimeout`), and
//!   `streamsGroupDescribe` / `StreamsGroup.asDescribedGroup`.
//!
//! Simplified: the records a request writes are applied to the group when the request succeeds
//! (a failed request changes nothing), in the order the broker replays them; the topology is
//! configured against the topics on every heartbeat (the metadata refresh interval is 0); the
//! initial rebalance delay and the assignment interval are 0 and the assignor runs on the
//! request path; rack-aware assignment tags, the topology description plugin and active-task
//! epochs are not modelled; client id and host are empty.
//!
//! Warm-up tasks: the reported task offsets are kept per member (`StreamsGroup.taskOffsets`,
//! `MemberTaskOffsets.update`; dropped with the member, kept across coordinator moves, which
//! Kafka's in-memory map is not) and rank the sticky assignor's standby candidates; the target
//! assignment is refined into an intermediate assignment (`refiner`: `refineAssignment`,
//! `refinedAssignmentForEpoch`, the per-epoch cache and its relabelling, the REFINED epoch bump
//! of a STABLE group). Kafka 4.4's refiner is the identity, so Kafka 4.4 assigns no warm-up
//! tasks ([`WarmupRefiner::Kafka44`], the default); [`WarmupRefiner::CurrentOwnerWarmup`]
//! models a refiner that does, for the member's sake (not a 4.4 rule).
//!
//! Internal topics: an answer with MISSING_INTERNAL_TOPICS "creates" the topics it lists at once
//! (the broker's `KafkaApis` creates `internalTopicsToBeCreated` after the heartbeat), so the
//! next heartbeat finds them; [`StreamsGroups::internal_topics`] lists them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;

use crate::messages::streams_group_describe_response as desc;
use crate::messages::streams_group_heartbeat_request as req;
use crate::messages::streams_group_heartbeat_response as resp;
use crate::messages::{
    StreamsGroupDescribeRequest, StreamsGroupDescribeResponse, StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatResponse,
};
use crate::sim::codes::*;

mod assignor;
mod group;
mod reconcile;
mod refiner;
pub mod scenario;
#[cfg(test)]
mod tests;
mod topology;

use group::{Group, GroupState, Member, TaskId, Tasks};
use reconcile::Reconciler;
pub use refiner::WarmupRefiner;
use topology::{ConfiguredSub, Topology};

/// `Errors.STREAMS_INVALID_TOPOLOGY`.
pub(crate) const STREAMS_INVALID_TOPOLOGY: i16 = 130;
/// `StreamsGroupHeartbeatRequest.LEAVE_GROUP_MEMBER_EPOCH`.
const LEAVE_EPOCH: i32 = -1;
/// `LEAVE_GROUP_STATIC_MEMBER_EPOCH`.
const STATIC_LEAVE_EPOCH: i32 = -2;
/// `Status.STALE_TOPOLOGY`.
const STALE_TOPOLOGY: i8 = 0;
/// `Status.SHUTDOWN_APPLICATION`.
const SHUTDOWN_APPLICATION: i8 = 4;

/// A task: subtopology id and partition.
pub type Task = (String, i32);

/// How the coordinator tracks which processes hold a task, for the check that withholds a
/// task from a member while another member of its process still holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OwnershipIndex {
    /// Kafka 4.4's index: a process id per active task, a set of process ids per standby /
    /// warm-up task; a process leaves a task's set when ONE of its members releases the task,
    /// even if another member of the process still holds it (KAFKA-21401).
    #[default]
    PerProcess,
    /// The correct index: each member holding a task counts until it releases it.
    PerMember,
}

/// Settings of [`StreamsGroups`] (the broker's defaults).
#[derive(Debug, Clone)]
pub struct StreamsGroupSettings {
    /// `group.streams.session.timeout.ms` (45 s).
    pub session_timeout: Duration,
    /// `group.streams.heartbeat.interval.ms` (5 s).
    pub heartbeat_interval: Duration,
    /// `streams.num.standby.replicas` (group config; 0).
    pub num_standby_replicas: u32,
    /// `group.streams.task.offset.interval.ms` (60000).
    pub task_offset_interval_ms: i32,
    /// `group.streams.acceptable.recovery.lag` (10000; group config
    /// `streams.acceptable.recovery.lag`): sent in every answer, and the refiner's bound.
    pub acceptable_recovery_lag: i64,
    /// `group.streams.num.warmup.replicas` (2; group config `streams.num.warmup.replicas`):
    /// 0 turns the refinement off (`GroupMetadataManager.refineAssignment`).
    pub num_warmup_replicas: u32,
    /// The refiner (`AssignmentRefiner.refine`): Kafka 4.4's returns the target assignment.
    pub warmup_refiner: WarmupRefiner,
    /// `group.streams.max.size` (unbounded).
    pub max_size: usize,
    /// The ownership index the reconciliation consults.
    pub ownership_index: OwnershipIndex,
}

impl Default for StreamsGroupSettings {
    fn default() -> Self {
        Self {
            session_timeout: Duration::from_millis(45_000),
            heartbeat_interval: Duration::from_millis(5_000),
            num_standby_replicas: 0,
            task_offset_interval_ms: 60_000,
            acceptable_recovery_lag: 10_000,
            num_warmup_replicas: 2,
            warmup_refiner: WarmupRefiner::Kafka44,
            max_size: usize::MAX,
            ownership_index: OwnershipIndex::PerProcess,
        }
    }
}

/// One member as the coordinator holds it, for invariants and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberView {
    /// Member id.
    pub member_id: String,
    /// Instance id of a static member.
    pub instance_id: Option<String>,
    /// Process id.
    pub process_id: String,
    /// Member epoch (-2: a static member that left temporarily).
    pub epoch: i32,
    /// `STABLE`, `UNREVOKED_TASKS` or `UNRELEASED_TASKS`.
    pub state: &'static str,
    /// Current active tasks.
    pub active: BTreeSet<Task>,
    /// Current standby tasks.
    pub standby: BTreeSet<Task>,
    /// Current warm-up tasks.
    pub warmup: BTreeSet<Task>,
    /// Active tasks pending revocation.
    pub pending_active: BTreeSet<Task>,
    /// Standby tasks pending revocation.
    pub pending_standby: BTreeSet<Task>,
    /// Warm-up tasks pending revocation.
    pub pending_warmup: BTreeSet<Task>,
    /// Target active tasks.
    pub target_active: BTreeSet<Task>,
    /// Target standby tasks.
    pub target_standby: BTreeSet<Task>,
    /// Target warm-up tasks (the assignor assigns none).
    pub target_warmup: BTreeSet<Task>,
    /// The member's slice of the intermediate assignment cached for the group's assignment
    /// epoch (`StreamsGroup.refinedAssignment`), if one is.
    pub refined: Option<(BTreeSet<Task>, BTreeSet<Task>, BTreeSet<Task>)>,
    /// The lags (end offset - offset) of the tasks the member last reported both for.
    pub reported_lags: BTreeMap<Task, i64>,
}

/// An error answer: code and message (`ApiError.fromThrowable`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HbError {
    pub(crate) code: i16,
    pub(crate) message: String,
}

impl HbError {
    pub(crate) fn new(code: i16, message: String) -> Self {
        Self { code, message }
    }
}

fn invalid(message: &str) -> HbError {
    HbError::new(INVALID_REQUEST, message.to_owned())
}

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_owned())
}

fn ms(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

/// `Utils.throwIfEmptyString`: Java's `trim()` strips characters up to U+0020.
fn blank(x: &str) -> bool {
    x.trim_matches(|c: char| c <= ' ').is_empty()
}

/// The streams groups of one coordinator.
#[derive(Debug, Clone)]
pub struct StreamsGroups {
    config: StreamsGroupSettings,
    groups: BTreeMap<String, Group>,
    /// Internal topics created for MISSING_INTERNAL_TOPICS answers: name -> partitions.
    internal_topics: BTreeMap<String, i32>,
    /// Session deadlines by (group, member).
    sessions: BTreeMap<(String, String), Instant>,
    /// (group, member) whose last removal was a session expiry (the invariants give those no
    /// zombie excuse: the member's lease ran out first).
    session_expired: std::collections::BTreeSet<(String, String)>,
    /// Rebalance deadlines by (group, member), with the epoch the member must have left.
    rebalances: BTreeMap<(String, String), (Instant, i32)>,
    /// See [`StreamsGroups::refiner_faults`].
    refiner_faults: Vec<String>,
    /// See [`StreamsGroups::warmup_stats`].
    warmup_stats: WarmupStats,
}

/// What the refinement did so far ([`StreamsGroups::warmup_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WarmupStats {
    /// Refinement steps: group epochs bumped by AssignmentUpdate.REFINED.
    pub refinement_steps: u64,
    /// Warm-up tasks granted to members by the reconciliation.
    pub granted: u64,
    /// Warm-up tasks promoted to active in place.
    pub promoted: u64,
}

impl StreamsGroups {
    /// No groups yet.
    pub fn new(config: StreamsGroupSettings) -> Self {
        Self {
            config,
            groups: BTreeMap::new(),
            internal_topics: BTreeMap::new(),
            sessions: BTreeMap::new(),
            session_expired: std::collections::BTreeSet::new(),
            rebalances: BTreeMap::new(),
            refiner_faults: Vec::new(),
            warmup_stats: WarmupStats::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &StreamsGroupSettings {
        &self.config
    }

    /// The internal topics created so far (name -> partitions).
    pub fn internal_topics(&self) -> &BTreeMap<String, i32> {
        &self.internal_topics
    }

    /// The ids of the groups.
    pub fn group_ids(&self) -> Vec<String> {
        self.groups.keys().cloned().collect()
    }

    /// A group's state name, group epoch and assignment epoch.
    pub fn epochs(&self, group_id: &str) -> Option<(&'static str, i32, i32)> {
        let g = self.groups.get(group_id)?;
        Some((g.state().name(), g.group_epoch, g.assignment_epoch))
    }

    /// The members of a group (member-id order), empty if there is no such group.
    pub fn members(&self, group_id: &str) -> Vec<MemberView> {
        let Some(g) = self.groups.get(group_id) else {
            return Vec::new();
        };
        g.members
            .values()
            .map(|m| {
                let target = g.target.get(&m.member_id).cloned().unwrap_or_default();
                let refined = g.refined_for(g.assignment_epoch).map(|a| {
                    let t = a.get(&m.member_id).cloned().unwrap_or_default();
                    (t.active, t.standby, t.warmup)
                });
                MemberView {
                    member_id: m.member_id.clone(),
                    instance_id: m.instance_id.clone(),
                    process_id: m.process_id.clone(),
                    epoch: m.epoch,
                    state: m.state.name(),
                    active: m.assigned.active.clone(),
                    standby: m.assigned.standby.clone(),
                    warmup: m.assigned.warmup.clone(),
                    pending_active: m.pending_revocation.active.clone(),
                    pending_standby: m.pending_revocation.standby.clone(),
                    pending_warmup: m.pending_revocation.warmup.clone(),
                    target_active: target.active,
                    target_standby: target.standby,
                    target_warmup: target.warmup,
                    refined,
                    reported_lags: g
                        .task_offsets
                        .get(&m.member_id)
                        .map(|o| {
                            o.offsets
                                .keys()
                                .filter_map(|t| o.lag(t).map(|l| (t.clone(), l)))
                                .collect()
                        })
                        .unwrap_or_default(),
                }
            })
            .collect()
    }

    /// The member ids of a group with their member epochs (member-id order; cheaper than
    /// [`Self::members`]).
    pub fn member_epochs(&self, group_id: &str) -> Vec<(&str, i32)> {
        self.groups
            .get(group_id)
            .map(|g| {
                g.members
                    .values()
                    .map(|m| (m.member_id.as_str(), m.epoch))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether a group holds `member_id` (in any epoch).
    /// Whether the last removal of `member_id` from `group_id` was a session expiry.
    pub fn expired_by_session(&self, group_id: &str, member_id: &str) -> bool {
        self.session_expired
            .contains(&(group_id.to_owned(), member_id.to_owned()))
    }

    /// Whether `group_id` has `member_id`.
    pub fn has_member(&self, group_id: &str, member_id: &str) -> bool {
        self.groups
            .get(group_id)
            .is_some_and(|g| g.members.contains_key(member_id))
    }

    /// Intermediate assignments the refiner derived with a warm-up task on a process where the
    /// same assignment has the task active, described (`AssignmentRefiner`: "a process must not
    /// hold a task twice"); checked against the members' processes the refiner was given.
    pub fn refiner_faults(&self) -> &[String] {
        &self.refiner_faults
    }

    /// What the refinement did so far.
    pub fn warmup_stats(&self) -> WarmupStats {
        self.warmup_stats
    }

    /// Standby / warm-up holdings missing from the broker's per-process index: (task, process)
    /// pairs a member of the process holds while the index has no entry for the process.
    pub fn lost_index_entries(&self, group_id: &str) -> Vec<(Task, String)> {
        self.groups
            .get(group_id)
            .map(|g| g.index.lost_entries())
            .unwrap_or_default()
    }

    /// The earliest session or rebalance deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        let sessions = self.sessions.values().copied();
        let rebalances = self.rebalances.values().map(|(t, _)| *t);
        sessions.chain(rebalances).min()
    }

    /// Fires the session and rebalance timeouts due at `now`: the member is fenced
    /// (`streamsGroupFenceMemberOperation`; a rebalance timeout only if the member is still in
    /// the epoch it had to leave, `scheduleStreamsGroupRebalanceTimeout`).
    pub fn expire(&mut self, now: Instant) {
        let due: Vec<(String, String)> = self
            .sessions
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            self.sessions.remove(&key);
            if self.has_member(&key.0, &key.1) {
                self.fence(&key.0, &key.1);
                self.session_expired.insert(key);
            }
        }
        let due: Vec<((String, String), i32)> = self
            .rebalances
            .iter()
            .filter(|(_, (t, _))| *t <= now)
            .map(|(k, (_, e))| (k.clone(), *e))
            .collect();
        for (key, epoch) in due {
            self.rebalances.remove(&key);
            let still = self
                .groups
                .get(&key.0)
                .and_then(|g| g.members.get(&key.1))
                .is_some_and(|m| m.epoch == epoch);
            if still {
                self.fence(&key.0, &key.1);
            }
        }
    }

    /// `streamsGroupFenceMember`: the member leaves, the group epoch is bumped, and the
    /// assignment epoch follows it when the group becomes empty.
    fn fence(&mut self, group_id: &str, member_id: &str) {
        self.session_expired
            .remove(&(group_id.to_owned(), member_id.to_owned()));
        let Some(g) = self.groups.get_mut(group_id) else {
            return;
        };
        if !g.members.contains_key(member_id) {
            return;
        }
        let last = g.members.len() == 1;
        g.remove_member(member_id);
        g.group_epoch += 1;
        if last {
            g.assignment_epoch = g.group_epoch;
        }
        self.cancel_timers(group_id, member_id);
    }

    fn cancel_timers(&mut self, group_id: &str, member_id: &str) {
        let key = (group_id.to_owned(), member_id.to_owned());
        self.sessions.remove(&key);
        self.rebalances.remove(&key);
    }

    /// Handles a StreamsGroupHeartbeat of `version`, with `topics` (name -> partitions) the
    /// topics of the cluster (internal topics this model created are added).
    pub fn heartbeat(
        &mut self,
        request: &StreamsGroupHeartbeatRequest,
        version: i16,
        topics: &BTreeMap<String, i32>,
        now: Instant,
    ) -> StreamsGroupHeartbeatResponse {
        let result = if !(0..=1).contains(&version) {
            Err(HbError::new(
                UNSUPPORTED_VERSION,
                format!("StreamsGroupHeartbeat version {version} is not supported."),
            ))
        } else {
            validate(request).and_then(|()| {
                if request.member_epoch == LEAVE_EPOCH || request.member_epoch == STATIC_LEAVE_EPOCH
                {
                    self.leave(request)
                } else {
                    self.join_or_heartbeat(request, topics, now)
                }
            })
        };
        result.unwrap_or_else(|e| {
            // `GroupCoordinatorService.streamsGroupHeartbeat`: only the error is set.
            StreamsGroupHeartbeatResponse::default()
                .with_error_code(e.code)
                .with_error_message(Some(s(&e.message)))
        })
    }

    /// `GroupMetadataManager.streamsGroupLeave`.
    fn leave(
        &mut self,
        request: &StreamsGroupHeartbeatRequest,
    ) -> Result<StreamsGroupHeartbeatResponse, HbError> {
        let group_id = request.group_id.0.as_str();
        let member_id = request.member_id.as_str();
        let g = self.groups.get_mut(group_id).ok_or_else(|| {
            HbError::new(GROUP_ID_NOT_FOUND, format!("Group {group_id} not found."))
        })?;
        if request.shutdown_application {
            // `setShutdownRequestMemberId`: the first request wins.
            g.shutdown_requester
                .get_or_insert_with(|| member_id.to_owned());
        }
        let answer = StreamsGroupHeartbeatResponse::default()
            .with_member_id(request.member_id.clone())
            .with_member_epoch(request.member_epoch)
            .with_status(Some(Vec::new()));
        let Some(instance_id) = request.instance_id.as_ref().map(|i| i.as_str()) else {
            // A dynamic member leaves (`getMemberOrThrow`, `streamsGroupFenceMember`).
            if !g.members.contains_key(member_id) {
                return Err(unknown_member(member_id, group_id));
            }
            self.fence(group_id, member_id);
            return Ok(answer);
        };
        let member = g
            .static_member(instance_id)
            .ok_or_else(|| unknown_instance(instance_id))?;
        if member.member_id != member_id {
            return Err(fenced_instance(member_id, instance_id, &member.member_id));
        }
        if request.member_epoch == STATIC_LEAVE_EPOCH {
            // `streamsGroupStaticMemberGroupLeave`: the member stays with its assignment, in
            // epoch -2, its pending revocations dropped; its session timeout keeps running.
            let mut left = member.clone();
            left.epoch = STATIC_LEAVE_EPOCH;
            left.pending_revocation = Tasks::default();
            g.put_member(left);
            Ok(StreamsGroupHeartbeatResponse::default()
                .with_member_id(request.member_id.clone())
                .with_member_epoch(STATIC_LEAVE_EPOCH)
                .with_status(Some(Vec::new())))
        } else {
            self.fence(group_id, member_id);
            Ok(answer)
        }
    }

    /// `GroupMetadataManager.streamsGroupHeartbeat` (epoch 0 joins and regular heartbeats).
    fn join_or_heartbeat(
        &mut self,
        request: &StreamsGroupHeartbeatRequest,
        topics: &BTreeMap<String, i32>,
        now: Instant,
    ) -> Result<StreamsGroupHeartbeatResponse, HbError> {
        let group_id = request.group_id.0.as_str();
        let member_id = request.member_id.as_str();
        let epoch = request.member_epoch;
        let joining = epoch == 0;
        let existed = self.groups.contains_key(group_id);
        let kind = self.config.ownership_index;
        // The group is changed on a copy, kept only if the request succeeds.
        let mut g = match self.groups.get(group_id) {
            Some(g) => g.clone(),
            None if joining => Group::new(kind),
            // `getStreamsGroupOrThrow`.
            None => {
                return Err(HbError::new(
                    GROUP_ID_NOT_FOUND,
                    format!("Streams group {group_id} not found."),
                ));
            }
        };
        let instance_id = request.instance_id.as_ref().map(|i| i.as_str());
        if joining {
            self.throw_if_full(&g, instance_id, member_id)?;
        }
        let owned = owned_tasks(request);

        // Get or create the member.
        let mut replaced: Option<Member> = None;
        let member = match instance_id {
            None => {
                // `getOrMaybeCreateDynamicStreamsGroupMember`.
                let m = match g.members.get(member_id) {
                    Some(m) => m.clone(),
                    None if joining => Member::with_defaults(member_id),
                    None => return Err(unknown_member(member_id, group_id)),
                };
                check_epoch(&m, epoch, request)?;
                m
            }
            Some(inst) => match (joining, g.static_member(inst).cloned()) {
                // `getOrMaybeCreateStaticStreamsGroupMember`: a new static member.
                (true, None) => g
                    .members
                    .get(member_id)
                    .cloned()
                    .unwrap_or_else(|| Member::with_defaults(member_id)),
                (true, Some(old)) => {
                    // `throwIfInstanceIdIsUnreleased`: only a member that left with -2 can be
                    // replaced.
                    if old.epoch != STATIC_LEAVE_EPOCH {
                        return Err(HbError::new(
                            UNRELEASED_INSTANCE_ID,
                            format!(
                                "Static member {member_id} with instance id {inst} cannot join the group because the instance id is owned by {} member.",
                                old.member_id
                            ),
                        ));
                    }
                    // The replacement copies the old member (assignment included) under the new
                    // member id, in epoch 0.
                    // `relabelRefinedAssignment`: the cached intermediate assignment follows.
                    g.relabel_refined(&old.member_id, member_id);
                    let mut copy = old.clone();
                    copy.member_id = member_id.to_owned();
                    copy.epoch = 0;
                    copy.previous_epoch = 0;
                    replaced = Some(old);
                    copy
                }
                (false, old) => {
                    // `throwIfStaticMemberIsUnknown`, `throwIfInstanceIdIsFenced`.
                    let old = old.ok_or_else(|| unknown_instance(inst))?;
                    if old.member_id != member_id {
                        return Err(fenced_instance(member_id, inst, &old.member_id));
                    }
                    check_epoch(&old, epoch, request)?;
                    old
                }
            },
        };

        // 1. Create or update the member.
        let mut updated = member.clone();
        if let Some(inst) = instance_id {
            updated.instance_id = Some(inst.to_owned());
        }
        if let Some(rack) = &request.rack_id {
            updated.rack_id = Some(rack.to_string());
        }
        if request.rebalance_timeout_ms != -1 {
            updated.rebalance_timeout_ms = request.rebalance_timeout_ms;
        }
        if let Some(t) = &request.topology {
            updated.topology_epoch = t.epoch;
        }
        if let Some(p) = &request.process_id {
            updated.process_id = p.to_string();
        }
        if let Some(tags) = &request.client_tags {
            updated.client_tags = tags
                .iter()
                .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                .collect();
        }
        let endpoint = request
            .user_endpoint
            .as_ref()
            .map(|e| (e.host.to_string(), e.port));
        // A join sets the endpoint (none clears it); a heartbeat only changes it when sent.
        if joining || endpoint.is_some() {
            updated.user_endpoint = endpoint;
        }
        // `hasStreamsMemberMetadataChanged`: any change writes the member; a static member
        // bumps the group epoch only for a change of topology epoch, rack, tags or process.
        let metadata_changed = updated != member;
        let mut recompute = metadata_changed
            && (instance_id.is_none()
                || member.topology_epoch != updated.topology_epoch
                || member.rack_id != updated.rack_id
                || member.client_tags != updated.client_tags
                || member.process_id != updated.process_id);

        // 2. `maybeUpdateTopology`.
        if let Some(t) = &request.topology {
            let from_request = Topology::from_request(t)?;
            match &g.topology {
                None => g.topology = Some(from_request),
                Some(current) if current.epoch > t.epoch => {}
                Some(current) if *current != from_request => {
                    return Err(invalid("Topology updates are not supported yet."));
                }
                Some(_) => {}
            }
        }
        let Some(topology) = g.topology.clone() else {
            return Err(HbError::new(
                UNKNOWN_SERVER_ERROR,
                "The topology is null and the group topology is also null.".into(),
            ));
        };
        let mut statuses = Vec::new();
        // `maybeSetTopologyStaleStatus`.
        if updated.topology_epoch < topology.epoch {
            statuses.push(status(
                STALE_TOPOLOGY,
                format!(
                    "The member's topology epoch {} is behind the group's topology epoch {}.",
                    updated.topology_epoch, topology.epoch
                ),
            ));
        }

        // 3. Configure the topology against the topics (`InternalTopicManager.configureTopics`);
        // a change of the topics' partition counts (the metadata hash) bumps the group epoch.
        let mut metadata = self.internal_topics.clone();
        metadata.extend(topics.iter().map(|(k, v)| (k.clone(), *v)));
        let configured = topology::configure(&topology, &metadata)?;
        let snapshot: BTreeMap<String, i32> = topology
            .required_topics()
            .into_iter()
            .filter_map(|t| metadata.get(&t).map(|n| (t, *n)))
            .collect();
        if snapshot != g.metadata {
            recompute = true;
        }
        g.configured = Some(configured.clone());
        // 3b. `throwIfRequestContainsInvalidTasks`.
        let mut validated_epoch = -1;
        if let Some(subs) = configured.ready_subtopologies() {
            validated_epoch = topology.epoch;
            for list in [
                &request.active_tasks,
                &request.standby_tasks,
                &request.warmup_tasks,
            ]
            .into_iter()
            .flatten()
            {
                check_tasks(subs, list)?;
            }
        }
        // The task offsets the member reported (`StreamsGroup.updateTaskOffsets` with
        // `MemberTaskOffsets.update`), after the task validation, kept even when the answer
        // changes nothing else.
        if request.task_offsets.is_some() || request.task_end_offsets.is_some() {
            let next = g
                .task_offsets
                .get(member_id)
                .cloned()
                .unwrap_or_default()
                .update(
                    task_offsets(request.task_offsets.as_deref())?,
                    task_offsets(request.task_end_offsets.as_deref())?,
                );
            g.task_offsets.insert(member_id.to_owned(), next);
        }
        if validated_epoch != g.validated_topology_epoch {
            recompute = true;
        }
        if !recompute && g.last_num_standby_replicas != Some(self.config.num_standby_replicas) {
            // The assignment configurations changed.
            recompute = true;
        }
        // `streamsGroupHeartbeat`: with nothing to recompute in a STABLE group, the target
        // assignment is refined (`refineAssignment`); a slice of this member that differs from
        // its tasks (`sameTasks`) is a refinement step: AssignmentUpdate.REFINED bumps the group
        // epoch without running the assignor.
        let mut refined: Option<BTreeMap<String, Tasks>> = None;
        let mut refine_only = false;
        if !recompute && g.state() == GroupState::Stable {
            let r = self.refine_assignment(&g, &g.members, &g.target, &configured);
            self.check_refined(&g.members, &r, g.group_epoch + 1);
            refine_only = r.get(member_id).cloned().unwrap_or_default() != updated.assigned
                // Not a Kafka 4.4 rule (its refiner is the identity, so this never holds
                // there): a refined assignment that moves another member's tasks away from
                // the one cached for this epoch is a refinement step too, or members already
                // reconciled at this epoch would keep what the new slices hand to others.
                || g.refined_for(g.assignment_epoch).is_some_and(|cached| *cached != r);
            refined = Some(r);
        }
        if refine_only {
            g.group_epoch += 1;
        }
        if recompute {
            g.group_epoch += 1;
            g.metadata = snapshot;
            g.validated_topology_epoch = validated_epoch;
            g.last_num_standby_replicas = Some(self.config.num_standby_replicas);
        }

        // 4. `maybeUpdateStreamsTargetAssignment`, on the members as this request leaves them:
        // a replaced static member's target assignment is relabelled to the new member id.
        let mut members = g.members.clone();
        let mut target = g.target.clone();
        if let Some(old) = &replaced {
            members.remove(&old.member_id);
            if let Some(t) = target.remove(&old.member_id) {
                target.insert(member_id.to_owned(), t);
            }
        }
        members.insert(member_id.to_owned(), updated.clone());
        let mut target_epoch = g.assignment_epoch;
        if g.assignment_epoch < g.group_epoch {
            if !refine_only {
                target = self.compute_target(
                    &members,
                    &g.task_offsets,
                    configured.ready_subtopologies(),
                );
            }
            // `maybeUpdateStreamsTargetAssignment` with `refineOnly`: only the assignment epoch
            // moves (the target-assignment metadata record); the target stays.
            target_epoch = g.group_epoch;
        }

        // 4b. The intermediate assignment of the epoch: the one refined above (then cached,
        // `maybeCacheRefinedAssignment`), else the one cached for the epoch, else derived now
        // (`refinedAssignmentForEpoch`). Kafka 4.4 hands the refiner the members as recorded
        // before this request (`group.members()`), which its refiner (the identity) ignores;
        // the modelled refiner gets the members as the assignor does (this member as updated,
        // a replaced static member out), so that it knows a joining member's process.
        let refined = match refined {
            Some(r) => r,
            None => match g.refined_for(target_epoch) {
                Some(r) => r.clone(),
                None => {
                    let r = self.refine_assignment(&g, &members, &target, &configured);
                    self.check_refined(&members, &r, target_epoch);
                    r
                }
            },
        };
        if self.config.num_warmup_replicas > 0 {
            g.refined = Some((target_epoch, refined.clone()));
        }

        // 5. `maybeReconcile` toward the member's slice of the intermediate assignment, against
        // the ownership index as it was before this request.
        let member_target = refined.get(member_id).cloned().unwrap_or_default();
        let reconciled = if updated.is_reconciled_to(target_epoch) {
            updated.clone()
        } else {
            Reconciler {
                member: &updated,
                target_epoch,
                target: &member_target,
                index: &g.index,
                owned: owned.as_ref(),
            }
            .build()
        };

        // The records, replayed in the broker's order: `replaceStreamsMember` (the old member
        // out, its copy in), the member record, the target assignment, the current assignment.
        if let Some(old) = &replaced {
            g.remove_member(&old.member_id);
            g.put_member(member.clone());
            self.cancel_timers(group_id, &old.member_id);
        }
        if metadata_changed || !g.members.contains_key(member_id) {
            g.put_member(updated.clone());
        }
        g.target = target;
        g.assignment_epoch = target_epoch;
        let key = (group_id.to_owned(), member_id.to_owned());
        if refine_only {
            self.warmup_stats.refinement_steps += 1;
        }
        if reconciled != updated {
            let w = &updated.assigned.warmup;
            self.warmup_stats.granted += reconciled.assigned.warmup.difference(w).count() as u64;
            self.warmup_stats.promoted += w
                .iter()
                .filter(|t| reconciled.assigned.active.contains(*t))
                .count() as u64;
            g.put_member(reconciled.clone());
            if reconciled.state == group::MemberState::UnrevokedTasks {
                let deadline = now
                    + Duration::from_millis(
                        u64::try_from(reconciled.rebalance_timeout_ms).unwrap_or(0),
                    );
                self.rebalances
                    .insert(key.clone(), (deadline, reconciled.epoch));
            } else {
                self.rebalances.remove(&key);
            }
        }
        self.sessions.insert(key, now + self.config.session_timeout);
        if request.shutdown_application {
            g.shutdown_requester
                .get_or_insert_with(|| member_id.to_owned());
        }

        // The answer.
        let mut answer = StreamsGroupHeartbeatResponse::default()
            .with_member_id(s(&reconciled.member_id))
            .with_member_epoch(reconciled.epoch)
            .with_heartbeat_interval_ms(ms(self.config.heartbeat_interval))
            .with_task_offset_interval_ms(self.config.task_offset_interval_ms)
            .with_acceptable_recovery_lag(self.config.acceptable_recovery_lag);
        // The assignment only when joining or when it changed.
        let assigned_changed = member.assigned != reconciled.assigned;
        if joining || assigned_changed {
            answer.active_tasks = Some(task_ids(&reconciled.assigned.active));
            answer.standby_tasks = Some(task_ids(&reconciled.assigned.standby));
            answer.warmup_tasks = Some(task_ids(&reconciled.assigned.warmup));
        }
        // `hasUserEndpointChanged`; the endpoint information epoch moves so peers refetch.
        let endpoint_changed = member.user_endpoint != reconciled.user_endpoint;
        if endpoint_changed || (assigned_changed && reconciled.user_endpoint.is_some()) {
            g.endpoint_information_epoch += 1;
        }
        if g.endpoint_information_epoch != request.endpoint_information_epoch {
            answer.partitions_by_user_endpoint = Some(endpoints_to_partitions(
                &g,
                member_id,
                replaced.as_ref().map(|m| m.member_id.as_str()),
                &metadata,
            ));
        }
        if existed {
            // A group created by this request answers 0.
            answer.endpoint_information_epoch = g.endpoint_information_epoch;
        }
        if let Some((code, detail)) = &configured.error {
            self.internal_topics
                .extend(configured.to_create.iter().map(|(k, v)| (k.clone(), *v)));
            statuses.push(status(*code, detail.clone()));
        }
        if let Some(requester) = &g.shutdown_requester {
            statuses.push(status(
                SHUTDOWN_APPLICATION,
                format!(
                    "Streams group member {requester} encountered a fatal error and requested a shutdown for the entire application."
                ),
            ));
        }
        answer.status = Some(statuses);
        self.groups.insert(group_id.to_owned(), g);
        Ok(answer)
    }

    /// `throwIfStreamsGroupIsFull`.
    fn throw_if_full(
        &self,
        g: &Group,
        instance_id: Option<&str>,
        member_id: &str,
    ) -> Result<(), HbError> {
        if instance_id.is_some_and(|i| g.static_members.contains_key(i)) {
            return Ok(());
        }
        if g.members.len() >= self.config.max_size
            && (member_id.is_empty() || !g.members.contains_key(member_id))
        {
            return Err(HbError::new(
                GROUP_MAX_SIZE_REACHED,
                format!(
                    "The streams group has reached its maximum capacity of {} members.",
                    self.config.max_size
                ),
            ));
        }
        Ok(())
    }

    /// `GroupMetadataManager.refineAssignment`: the target assignment when warm-ups are off
    /// (`numWarmupReplicas == 0`), else `AssignmentRefiner.refine`'s intermediate assignment,
    /// unless it does not hand out as many active tasks as the target
    /// (`preservesActiveTaskCount`: then the target).
    fn refine_assignment(
        &self,
        g: &Group,
        members: &BTreeMap<String, Member>,
        target: &BTreeMap<String, Tasks>,
        configured: &topology::Configured,
    ) -> BTreeMap<String, Tasks> {
        if self.config.num_warmup_replicas == 0 {
            return target.clone();
        }
        let stateful = configured
            .ready_subtopologies()
            .map(|subs| {
                subs.iter()
                    .filter(|(_, s)| s.stateful())
                    .map(|(id, _)| id.as_str())
                    .collect()
            })
            .unwrap_or_default();
        let input = refiner::RefineInput {
            members,
            target,
            offsets: &g.task_offsets,
            stateful,
            num_warmup_replicas: self.config.num_warmup_replicas,
            acceptable_recovery_lag: self.config.acceptable_recovery_lag,
        };
        let refined = refiner::refine(self.config.warmup_refiner, &input);
        if refiner::preserves_active_task_count(target, &refined) {
            refined
        } else {
            target.clone()
        }
    }

    /// Records (in [`StreamsGroups::refiner_faults`]) a warm-up task `refined` puts on a
    /// process where it has the task active, by the processes of `members`.
    fn check_refined(
        &mut self,
        members: &BTreeMap<String, Member>,
        refined: &BTreeMap<String, Tasks>,
        epoch: i32,
    ) {
        let process = |id: &str| members.get(id).map(|m| m.process_id.as_str());
        for (w, tasks) in refined {
            for t in &tasks.warmup {
                for (a, other) in refined {
                    if other.active.contains(t) && process(a) == process(w) {
                        self.refiner_faults.push(format!(
                            "epoch {epoch}: warm-up task {}_{} of {w} on process {}, where {a} has it active",
                            t.0,
                            t.1,
                            process(w).unwrap_or("?")
                        ));
                    }
                }
            }
        }
    }

    /// `TargetAssignmentBuilder.build` with the `sticky` assignor: every member empty while
    /// the topology is not ready.
    fn compute_target(
        &self,
        members: &BTreeMap<String, Member>,
        offsets: &BTreeMap<String, group::MemberTaskOffsets>,
        subs: Option<&BTreeMap<String, ConfiguredSub>>,
    ) -> BTreeMap<String, Tasks> {
        let Some(subs) = subs else {
            return members
                .keys()
                .map(|id| (id.clone(), Tasks::default()))
                .collect();
        };
        let described: Vec<assignor::AssignorSubtopology<'_>> = subs
            .iter()
            .map(|(id, s)| assignor::AssignorSubtopology {
                id,
                num_tasks: s.num_tasks,
                stateful: s.stateful(),
            })
            .collect();
        let input: Vec<assignor::AssignorMember<'_>> = members
            .values()
            .map(|m| assignor::AssignorMember {
                member_id: &m.member_id,
                process_id: &m.process_id,
                current: &m.assigned,
                task_offsets: offsets.get(&m.member_id).map(|o| &o.offsets),
            })
            .collect();
        assignor::assign(&input, &described, self.config.num_standby_replicas)
    }

    /// Handles a StreamsGroupDescribe (`GroupMetadataManager.streamsGroupDescribe`,
    /// `StreamsGroup.asDescribedGroup`).
    pub fn describe(
        &self,
        request: &StreamsGroupDescribeRequest,
        _version: i16,
    ) -> StreamsGroupDescribeResponse {
        let groups = request
            .group_ids
            .iter()
            .map(|id| {
                let Some(g) = self.groups.get(id.0.as_str()) else {
                    return desc::DescribedGroup::default()
                        .with_group_id(id.clone())
                        .with_error_code(GROUP_ID_NOT_FOUND)
                        .with_error_message(Some(s(&format!(
                            "Group {} not found.",
                            id.0.as_str()
                        ))));
                };
                let members = g
                    .members
                    .values()
                    .map(|m| describe_member(m, g.target.get(&m.member_id)))
                    .collect();
                desc::DescribedGroup::default()
                    .with_group_id(id.clone())
                    .with_group_state(s(g.state().name()))
                    .with_group_epoch(g.group_epoch)
                    .with_assignment_epoch(g.assignment_epoch)
                    .with_assignor_name(Some(s("sticky")))
                    .with_topology(describe_topology(g))
                    .with_members(members)
            })
            .collect();
        StreamsGroupDescribeResponse::default().with_groups(groups)
    }
}

fn unknown_member(member_id: &str, group_id: &str) -> HbError {
    HbError::new(
        UNKNOWN_MEMBER_ID,
        format!("Member {member_id} is not a member of group {group_id}."),
    )
}

fn unknown_instance(instance_id: &str) -> HbError {
    HbError::new(
        UNKNOWN_MEMBER_ID,
        format!("Instance id {instance_id} is unknown."),
    )
}

fn fenced_instance(member_id: &str, instance_id: &str, by: &str) -> HbError {
    HbError::new(
        FENCED_INSTANCE_ID,
        format!(
            "Static member {member_id} with instance id {instance_id} was fenced by member {by}."
        ),
    )
}

fn status(code: i8, detail: String) -> resp::Status {
    resp::Status::default()
        .with_status_code(code)
        .with_status_detail(s(&detail))
}

/// `GroupCoordinatorService.throwIfStreamsGroupHeartbeatRequestIsUsingUnsupportedFeatures` and
/// `throwIfStreamsGroupHeartbeatRequestIsInvalid`.
fn validate(r: &StreamsGroupHeartbeatRequest) -> Result<(), HbError> {
    if let Some(t) = &r.topology {
        if t.subtopologies
            .iter()
            .any(|s| !s.source_topic_regex.is_empty())
        {
            return Err(invalid(
                "Regular expressions for source topics are not supported yet.",
            ));
        }
    }
    if blank(r.member_id.as_str()) {
        return Err(invalid("MemberId can't be empty."));
    }
    if blank(r.group_id.0.as_str()) {
        return Err(invalid("GroupId can't be empty."));
    }
    if r.instance_id.as_ref().is_some_and(|i| blank(i.as_str())) {
        return Err(invalid("InstanceId can't be empty."));
    }
    if r.rack_id.as_ref().is_some_and(|i| blank(i.as_str())) {
        return Err(invalid("RackId can't be empty."));
    }
    let not_empty = |l: &Option<Vec<req::TaskIds>>| l.as_ref().is_some_and(|l| !l.is_empty());
    if r.member_epoch == 0 {
        if r.rebalance_timeout_ms == -1 {
            return Err(invalid(
                "RebalanceTimeoutMs must be provided in first request.",
            ));
        }
        if not_empty(&r.active_tasks) {
            return Err(invalid("ActiveTasks must be empty when (re-)joining."));
        }
        if not_empty(&r.standby_tasks) {
            return Err(invalid("StandbyTasks must be empty when (re-)joining."));
        }
        if not_empty(&r.warmup_tasks) {
            return Err(invalid("WarmupTasks must be empty when (re-)joining."));
        }
        let Some(t) = &r.topology else {
            return Err(invalid("Topology must be non-null when (re-)joining."));
        };
        // `throwIfInvalidTopology`.
        for sub in &t.subtopologies {
            for c in &sub.state_changelog_topics {
                if c.partitions != 0 {
                    return Err(HbError::new(
                        STREAMS_INVALID_TOPOLOGY,
                        format!(
                            "Changelog topic {} must have an undefined partition count, but it is set to {}.",
                            c.name.0.as_str(),
                            c.partitions
                        ),
                    ));
                }
            }
        }
    } else if r.member_epoch == STATIC_LEAVE_EPOCH {
        if r.instance_id.is_none() {
            return Err(invalid("InstanceId can't be null."));
        }
    } else if r.member_epoch < STATIC_LEAVE_EPOCH {
        return Err(invalid(&format!(
            "MemberEpoch is {}, but must be greater than or equal to -2.",
            r.member_epoch
        )));
    }
    let lists = [&r.active_tasks, &r.standby_tasks, &r.warmup_tasks];
    if lists.iter().any(|l| l.is_some()) && lists.iter().any(|l| l.is_none()) {
        return Err(invalid(
            "If one task-type is non-null, all must be non-null.",
        ));
    }
    if r.member_epoch != 0 && r.topology.is_some() {
        return Err(invalid("Topology can only be provided when (re-)joining."));
    }
    Ok(())
}

fn to_tasks(list: &[req::TaskIds]) -> BTreeSet<TaskId> {
    list.iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.subtopology_id.to_string(), *p))
        })
        .collect()
}

/// `TasksTuple.fromHeartbeatRequest`, when the member reported its tasks.
/// `MemberTaskOffsets.toNestedMap`: a sent list by task; a duplicate is refused.
fn task_offsets(
    list: Option<&[req::TaskOffset]>,
) -> Result<Option<BTreeMap<TaskId, i64>>, HbError> {
    let Some(list) = list else {
        return Ok(None);
    };
    let mut out = BTreeMap::new();
    for o in list {
        let key = (o.subtopology_id.to_string(), o.partition);
        if out.insert(key, o.offset).is_some() {
            return Err(invalid(&format!(
                "Task offsets contain a duplicate entry for subtopology {} and partition {}.",
                o.subtopology_id.as_str(),
                o.partition
            )));
        }
    }
    Ok(Some(out))
}

fn owned_tasks(r: &StreamsGroupHeartbeatRequest) -> Option<Tasks> {
    match (&r.active_tasks, &r.standby_tasks, &r.warmup_tasks) {
        (Some(a), Some(s), Some(w)) => Some(Tasks {
            active: to_tasks(a),
            standby: to_tasks(s),
            warmup: to_tasks(w),
        }),
        _ => None,
    }
}

/// `areOwnedTasksContainedInAssignedTasks`: unknown (not reported) is not contained.
fn contained(owned: &Option<Vec<req::TaskIds>>, assigned: &BTreeSet<TaskId>) -> bool {
    let Some(owned) = owned else {
        return false;
    };
    owned.iter().all(|t| {
        let sub = t.subtopology_id.as_str();
        assigned.iter().any(|(id, _)| id == sub)
            && t.partitions
                .iter()
                .all(|p| assigned.contains(&(sub.to_owned(), *p)))
    })
}

/// `throwIfStreamsGroupMemberEpochIsInvalid`: a greater epoch is fenced; a smaller one is
/// accepted only if it is the previous epoch and the reported tasks are all still assigned (the
/// answer with the new epoch may have been lost).
fn check_epoch(m: &Member, epoch: i32, r: &StreamsGroupHeartbeatRequest) -> Result<(), HbError> {
    if epoch == 0 {
        return Ok(());
    }
    if epoch > m.epoch {
        return Err(HbError::new(
            FENCED_MEMBER_EPOCH,
            format!(
                "The streams group member has a greater member epoch ({epoch}) than the one known by the group coordinator ({}). The member must abandon all its partitions and rejoin.",
                m.epoch
            ),
        ));
    }
    if epoch < m.epoch
        && (epoch != m.previous_epoch
            || !contained(&r.active_tasks, &m.assigned.active)
            || !contained(&r.standby_tasks, &m.assigned.standby)
            || !contained(&r.warmup_tasks, &m.assigned.warmup))
    {
        return Err(HbError::new(
            FENCED_MEMBER_EPOCH,
            format!(
                "The streams group member has a smaller member epoch ({epoch}) than the one known by the group coordinator ({}). The member must abandon all its partitions and rejoin.",
                m.epoch
            ),
        ));
    }
    Ok(())
}

/// `throwIfRequestContainsInvalidTasks`.
fn check_tasks(
    subs: &BTreeMap<String, ConfiguredSub>,
    list: &[req::TaskIds],
) -> Result<(), HbError> {
    for t in list {
        let id = t.subtopology_id.as_str();
        let sub = subs
            .get(id)
            .ok_or_else(|| invalid(&format!("Subtopology {id} does not exist in the topology.")))?;
        for &p in &t.partitions {
            if p < 0 || p >= sub.num_tasks {
                return Err(invalid(&format!(
                    "Task {p} for subtopology {id} is invalid. Number of tasks for this subtopology: {}",
                    sub.num_tasks
                )));
            }
        }
    }
    Ok(())
}

/// Task ids grouped by subtopology (sorted), partitions sorted.
fn grouped(tasks: &BTreeSet<TaskId>) -> BTreeMap<&str, Vec<i32>> {
    let mut out: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (sub, p) in tasks {
        out.entry(sub.as_str()).or_default().push(*p);
    }
    out
}

fn task_ids(tasks: &BTreeSet<TaskId>) -> Vec<resp::TaskIds> {
    grouped(tasks)
        .into_iter()
        .map(|(sub, ps)| {
            resp::TaskIds::default()
                .with_subtopology_id(s(sub))
                .with_partitions(ps)
        })
        .collect()
}

/// `StreamsGroup.buildEndpointToPartitions`: every other member with an endpoint, then the
/// member itself (a replaced static member left out).
fn endpoints_to_partitions(
    g: &Group,
    member_id: &str,
    replaced: Option<&str>,
    metadata: &BTreeMap<String, i32>,
) -> Vec<resp::EndpointToPartitions> {
    let subs = g.configured.as_ref().and_then(|c| c.subtopologies.as_ref());
    let others = g
        .members
        .values()
        .filter(|m| m.member_id != member_id && Some(m.member_id.as_str()) != replaced);
    others
        .chain(g.members.get(member_id))
        .filter_map(|m| {
            let (host, port) = m.user_endpoint.as_ref()?;
            let standby: BTreeSet<TaskId> = m
                .assigned
                .standby
                .union(&m.assigned.warmup)
                .cloned()
                .collect();
            Some(
                resp::EndpointToPartitions::default()
                    .with_user_endpoint(
                        resp::Endpoint::default()
                            .with_host(s(host))
                            .with_port(*port),
                    )
                    .with_active_partitions(topic_partitions(&m.assigned.active, subs, metadata))
                    .with_standby_partitions(topic_partitions(&standby, subs, metadata)),
            )
        })
        .collect()
}

/// `EndpointToPartitionsManager.topicPartitions`: the partitions of a subtopology's source and
/// repartition source topics that a task reads (a topic with fewer partitions has none for the
/// higher task ids).
fn topic_partitions(
    tasks: &BTreeSet<TaskId>,
    subs: Option<&BTreeMap<String, ConfiguredSub>>,
    metadata: &BTreeMap<String, i32>,
) -> Vec<resp::TopicPartition> {
    let Some(subs) = subs else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (sub, ps) in grouped(tasks) {
        let Some(c) = subs.get(sub) else { continue };
        let topics: BTreeSet<&String> = c
            .source_topics
            .iter()
            .chain(c.repartition_source_topics.keys())
            .collect();
        for t in topics {
            let n = metadata.get(t).copied().unwrap_or(0);
            let parts: Vec<i32> = ps.iter().copied().filter(|p| *p < n).collect();
            if !parts.is_empty() {
                out.push(
                    resp::TopicPartition::default()
                        .with_topic(TopicName(s(t)))
                        .with_partitions(parts),
                );
            }
        }
    }
    out
}

fn describe_task_ids(tasks: &BTreeSet<TaskId>) -> Vec<desc::TaskIds> {
    grouped(tasks)
        .into_iter()
        .map(|(sub, ps)| {
            desc::TaskIds::default()
                .with_subtopology_id(s(sub))
                .with_partitions(ps)
        })
        .collect()
}

fn describe_assignment(t: &Tasks) -> desc::Assignment {
    desc::Assignment::default()
        .with_active_tasks(describe_task_ids(&t.active))
        .with_standby_tasks(describe_task_ids(&t.standby))
        .with_warmup_tasks(describe_task_ids(&t.warmup))
}

/// `StreamsGroupMember.asStreamsGroupDescribeMember`.
fn describe_member(m: &Member, target: Option<&Tasks>) -> desc::Member {
    desc::Member::default()
        .with_member_id(s(&m.member_id))
        .with_member_epoch(m.epoch)
        .with_instance_id(m.instance_id.as_deref().map(s))
        .with_rack_id(m.rack_id.as_deref().map(s))
        .with_client_id(s(&m.client_id))
        .with_client_host(s(&m.client_host))
        .with_topology_epoch(m.topology_epoch)
        .with_process_id(s(&m.process_id))
        .with_user_endpoint(
            m.user_endpoint
                .as_ref()
                .map(|(h, p)| desc::Endpoint::default().with_host(s(h)).with_port(*p)),
        )
        .with_client_tags(
            m.client_tags
                .iter()
                .map(|(k, v)| desc::KeyValue::default().with_key(s(k)).with_value(s(v)))
                .collect(),
        )
        .with_assignment(describe_assignment(&m.assigned))
        .with_target_assignment(target.map(describe_assignment).unwrap_or_default())
}

fn describe_topic(t: &topology::TopicInfo) -> desc::TopicInfo {
    desc::TopicInfo::default()
        .with_name(TopicName(s(&t.name)))
        .with_partitions(t.partitions)
        .with_replication_factor(t.replication_factor)
        .with_topic_configs(
            t.configs
                .iter()
                .map(|(k, v)| desc::KeyValue::default().with_key(s(k)).with_value(s(v)))
                .collect(),
        )
}

fn topic_names<'a>(names: impl IntoIterator<Item = &'a String>) -> Vec<TopicName> {
    names.into_iter().map(|n| TopicName(s(n))).collect()
}

/// `StreamsGroup.asDescribedGroup`: the configured topology when it is ready (internal topics'
/// partition counts decided), the topology as stored otherwise.
fn describe_topology(g: &Group) -> Option<desc::Topology> {
    if let Some((c, subs)) = g
        .configured
        .as_ref()
        .and_then(|c| c.ready_subtopologies().map(|s| (c, s)))
    {
        let subtopologies = subs
            .iter()
            .map(|(id, sub)| {
                desc::Subtopology::default()
                    .with_subtopology_id(s(id))
                    .with_source_topics(topic_names(&sub.source_topics))
                    .with_repartition_sink_topics(topic_names(&sub.repartition_sink_topics))
                    .with_state_changelog_topics(
                        sub.changelog_topics.values().map(describe_topic).collect(),
                    )
                    .with_repartition_source_topics(
                        sub.repartition_source_topics
                            .values()
                            .map(describe_topic)
                            .collect(),
                    )
            })
            .collect();
        return Some(
            desc::Topology::default()
                .with_epoch(c.epoch)
                .with_subtopologies(Some(subtopologies)),
        );
    }
    let t = g.topology.as_ref()?;
    let subtopologies = t
        .subtopologies
        .iter()
        .map(|(id, sub)| {
            desc::Subtopology::default()
                .with_subtopology_id(s(id))
                .with_source_topics(topic_names(&sub.source_topics))
                .with_repartition_sink_topics(topic_names(&sub.repartition_sink_topics))
                .with_state_changelog_topics(
                    sub.changelog_topics.iter().map(describe_topic).collect(),
                )
                .with_repartition_source_topics(
                    sub.repartition_source_topics
                        .iter()
                        .map(describe_topic)
                        .collect(),
                )
        })
        .collect();
    Some(
        desc::Topology::default()
            .with_epoch(t.epoch)
            .with_subtopologies(Some(subtopologies)),
    )
}
