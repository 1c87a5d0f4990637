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

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kafka_protocol::messages::consumer_group_heartbeat_response::{
    Assignment as CghAssignment, TopicPartitions as CghTopicPartitions,
};
use kafka_protocol::messages::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, ResponseKind,
};

use super::assignors::{self, AssignorMember, Tp};
use super::rules::{BrokerProfile, ServerAssignor};
use super::{Parked, SimCoordinator, ms, name, s, topic_id};
use crate::sim::codes::*;

/// `LEAVE_GROUP_STATIC_MEMBER_EPOCH`.
const STATIC_LEAVE_EPOCH: i32 = -2;
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
pub(super) struct ConsumerMemberState {
    pub(super) instance_id: Option<String>,
    pub(super) epoch: i32,
    previous_epoch: i32,
    state: CgState,
    topics: Vec<String>,
    rebalance_timeout_ms: i32,
    /// `serverAssignorName`: the assignor the member asked for.
    server_assignor: Option<String>,
    /// `assignedPartitions`: what the member owns (or may own) in its epoch.
    assigned: BTreeSet<Tp>,
    /// `partitionsPendingRevocation`: still owned by the member until it acknowledges.
    pending_revocation: BTreeSet<Tp>,
    /// The assignment epoch of each assigned or pending partition (4.3+ keeps
    /// `assignedPartitions` / `partitionsPendingRevocation` as partition ⇒ epoch maps: the
    /// target epoch at which the partition was added to the member, 0 after a static leave).
    epochs: BTreeMap<Tp, i32>,
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
            server_assignor: None,
            assigned: BTreeSet::new(),
            pending_revocation: BTreeSet::new(),
            epochs: BTreeMap::new(),
        }
    }

    /// `ConsumerGroupMember.assignmentEpoch` / `pendingRevocationEpoch`: the epoch at which the
    /// member got `tp`, when it holds it.
    pub(super) fn partition_epoch(&self, tp: &Tp) -> Option<i32> {
        self.epochs.get(tp).copied()
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

/// A KIP-848 group (`ConsumerGroup`), reduced.
///
/// Members' assigned and pending-revocation partitions change only through
/// [`put_member`](Self::put_member), [`take_member`](Self::take_member),
/// [`remove_member`](Self::remove_member) and [`static_leave`](Self::static_leave), which keep
/// the partition index (`held`) and the set of changed members (`changed`) up to date.
#[derive(Debug, Clone, Default)]
pub(super) struct ConsumerGroup {
    /// The group epoch (`groupEpoch`), bumped when the membership or a subscription changes.
    pub(super) epoch: i32,
    /// The target assignment's epoch (`assignmentEpoch`); behind `epoch` until the next
    /// heartbeat recomputes the target.
    assignment_epoch: i32,
    /// The target assignment, by member id (`targetAssignment`).
    target: BTreeMap<String, BTreeSet<Tp>>,
    /// When the target was last computed (`assignmentTimestamp`; 4.3+ waits
    /// `group.consumer.assignment.interval.ms` after it before the next one).
    assignment_time: Option<Instant>,
    pub(super) members: BTreeMap<String, ConsumerMemberState>,
    pub(super) static_members: BTreeMap<String, String>,
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
        // resetAssignedPartitionsEpochsToZero: the partitions count as assigned from epoch 0 to
        // whoever takes the instance over.
        m.epochs = m.assigned.iter().map(|tp| (tp.clone(), 0)).collect();
        self.put_member(member_id, m);
    }

    /// The member's target partitions (`None` when the target has no entry for it).
    fn target_of(&self, member_id: &str) -> Option<BTreeSet<Tp>> {
        self.target.get(member_id).cloned()
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

impl SimCoordinator {
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
    pub(super) fn consumer_heartbeat(&mut self, p: Parked, r: ConsumerGroupHeartbeatRequest) {
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
        // The same check: a ServerAssignor outside group.consumer.assignors.
        if let Some(a) = &r.server_assignor
            && self.config.rules.assignor(a.as_str()).is_none()
        {
            let a = a.to_string();
            self.note(|| format!("{member_id}: ServerAssignor {a}: UNSUPPORTED_ASSIGNOR"));
            return self.reply(p, Self::cgh_error(UNSUPPORTED_ASSIGNOR));
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
        if let Some(a) = &r.server_assignor {
            // maybeUpdateServerAssignorName.
            m.server_assignor = Some(a.to_string());
        }
        let mut subscription_changed = false;
        if let Some(t) = topics
            && t != m.topics
        {
            m.topics = t;
            subscription_changed = true;
        }
        if let Some(i) = &instance {
            // ConsumerGroup.updateStaticMember.
            c.static_members.insert(i.clone(), member_id.clone());
        }
        // 4.0-4.2 consumerGroupHeartbeat: "if the group is newly created, we must ensure that it
        // moves away from epoch 0" (gone in 4.3: only a subscription change bumps it).
        let profile = self.config.rules.profile;
        let new_group = profile.bumps_new_group_epoch() && c.epoch == 0;
        if subscription_changed || new_group {
            c.epoch += 1;
            let e = c.epoch;
            self.note(|| format!("{member_id}: subscription changed: group epoch bumped to {e}"));
        }
        // 2. maybeUpdateTargetAssignment when the group epoch is ahead of the target's; 4.3+
        // only once the assignment interval since the last one elapsed
        // (canComputeNextTargetAssignment), else the member reconciles to the last target.
        let c = self.consumer.as_ref().expect("created");
        if c.epoch > c.assignment_epoch {
            let interval = self.config.rules.effective_assignment_interval();
            let due = match c.assignment_time {
                Some(t) if !interval.is_zero() => self.now >= t + interval,
                _ => true,
            };
            if due {
                self.update_target_assignment();
            } else {
                let (e, a) = (c.epoch, c.assignment_epoch);
                self.note(|| {
                    format!(
                        "group epoch {e}: target stays at {a} until the assignment interval elapses"
                    )
                });
            }
        }
        // 3. maybeReconcile; 4.2+ forces consistency with a changed subscription.
        let changed = subscription_changed && profile.subscription_consistency();
        self.maybe_reconcile(&member_id, owned.as_ref(), changed);
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

    /// `throwIfConsumerGroupMemberEpochIsInvalid`; epoch 0 always passes from 4.2 on
    /// (KAFKA-19233). On 4.0/4.1 an epoch-0 heartbeat of a registered member is an older epoch
    /// like any other: accepted only when the member's previous epoch is 0 (a retried first
    /// join; the owned partitions of an epoch-0 request are empty, so always a subset), else
    /// FENCED_MEMBER_EPOCH until the session expires and removes the member.
    fn check_member_epoch(
        &mut self,
        member_id: &str,
        m: &ConsumerMemberState,
        epoch: i32,
        owned: Option<&BTreeSet<Tp>>,
    ) -> Result<(), i16> {
        if epoch == 0 && self.config.rules.profile.rejoin_at_epoch_zero() {
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
        self.consumer_session_expired.remove(member_id);
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

    /// `maybeUpdateTargetAssignment` (`TargetAssignmentBuilder` with the preferred assignor,
    /// `ConsumerGroup.computePreferredServerAssignor`: the one most members ask for, else the
    /// first of `group.consumer.assignors`): the new target of every member (members that left
    /// with -2 included: their partitions stay reserved) at the group epoch, computed from the
    /// previous one (see [`assignors`]).
    fn update_target_assignment(&mut self) {
        let partitions: BTreeMap<String, i32> = self.config.topics.iter().cloned().collect();
        let rules = &self.config.rules;
        let c = self.consumer.as_mut().expect("consumer group");
        let mut asked: BTreeMap<&str, usize> = BTreeMap::new();
        for m in c.members.values() {
            if let Some(a) = &m.server_assignor {
                *asked.entry(a.as_str()).or_default() += 1;
            }
        }
        // The most asked for; among equals, the first by name (the broker's pick among equal
        // counts follows its hash map's order).
        let preferred = asked
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .and_then(|(name, _)| rules.assignor(name));
        let assignor = preferred
            .or_else(|| rules.assignors.first().copied())
            .unwrap_or(ServerAssignor::Uniform);
        let members: Vec<AssignorMember<'_>> = c
            .members
            .iter()
            .map(|(id, m)| AssignorMember {
                id,
                instance: m.instance_id.as_deref(),
                topics: &m.topics,
            })
            .collect();
        assignors::assign(assignor, &members, &partitions, &mut c.target);
        c.assignment_epoch = c.epoch;
        c.assignment_time = Some(self.now);
        let e = c.epoch;
        self.note(|| {
            format!(
                "target assignment computed for epoch {e} ({})",
                assignor.name()
            )
        });
    }

    /// `maybeReconcile`: moves the member towards its target (`CurrentAssignmentBuilder`) and
    /// schedules the rebalance timeout while it has partitions to revoke (cancels it otherwise).
    fn maybe_reconcile(
        &mut self,
        member_id: &str,
        owned: Option<&BTreeSet<Tp>>,
        subscription_changed: bool,
    ) {
        let profile = self.config.rules.profile;
        let c = self.consumer.as_mut().expect("consumer group");
        let target_epoch = c.assignment_epoch;
        let m = &c.members[member_id];
        if !subscription_changed && m.is_reconciled_to(target_epoch) {
            return;
        }
        let next = current_assignment_builder(
            c,
            member_id,
            target_epoch,
            owned,
            subscription_changed,
            profile,
        );
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
    pub(super) fn consumer_rebalance_timeout_expired(&mut self, member_id: &str, epoch: i32) {
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
    pub(super) fn consumer_session_expired(&mut self, member_id: &str) {
        if self.consumer.is_some() && self.consumer_group_fence_member(member_id) {
            self.consumer_session_expired.insert(member_id.to_owned());
            self.note(|| format!("consumer member {member_id} session expired"));
        }
    }

    /// Whether the KIP-848 group's last removal of `member_id` was a session expiry.
    pub fn consumer_expired_by_session(&self, member_id: &str) -> bool {
        self.consumer_session_expired.contains(member_id)
    }
}

/// `CurrentAssignmentBuilder.build`: the member's next state. `subscription_changed` is only
/// ever set from 4.2 on (KAFKA-19431).
fn current_assignment_builder(
    c: &ConsumerGroup,
    member_id: &str,
    target_epoch: i32,
    owned: Option<&BTreeSet<Tp>>,
    subscription_changed: bool,
    profile: BrokerProfile,
) -> ConsumerMemberState {
    let m = &c.members[member_id];
    match m.state {
        CgState::Stable if m.epoch == target_epoch => {
            if subscription_changed {
                update_current_assignment(m, owned)
            } else {
                m.clone()
            }
        }
        CgState::UnrevokedPartitions if owns_revoked(owned, &m.pending_revocation) => {
            if subscription_changed {
                update_current_assignment(m, owned)
            } else {
                m.clone()
            }
        }
        CgState::UnrevokedPartitions if profile.bumps_epoch_after_revocation() => {
            // 4.0/4.1: "it can transition to the next epoch (current + 1)"; KAFKA-19974 (4.2)
            // keeps the member's epoch.
            compute_next_assignment(c, member_id, m.epoch + 1, target_epoch, owned, profile)
        }
        _ => compute_next_assignment(c, member_id, m.epoch, target_epoch, owned, profile),
    }
}

/// `CurrentAssignmentBuilder.ownsRevokedPartitions`: without owned partitions in the request the
/// member is assumed to still own them.
fn owns_revoked(owned: Option<&BTreeSet<Tp>>, revoked: &BTreeSet<Tp>) -> bool {
    owned.is_none_or(|o| o.iter().any(|tp| revoked.contains(tp)))
}

/// `CurrentAssignmentBuilder.updateCurrentAssignment` (4.2+): the partitions of topics the
/// member no longer subscribes to leave its assignment at once; still owned ⇒ pending
/// revocation (UNREVOKED_PARTITIONS, the epoch unchanged), already released ⇒ just dropped.
fn update_current_assignment(
    m: &ConsumerMemberState,
    owned: Option<&BTreeSet<Tp>>,
) -> ConsumerMemberState {
    let (keep, gone): (BTreeSet<Tp>, BTreeSet<Tp>) = m
        .assigned
        .iter()
        .cloned()
        .partition(|(t, _)| m.topics.contains(t));
    if gone.is_empty() {
        return m.clone();
    }
    let mut next = m.clone();
    let pending: BTreeSet<Tp> = m.pending_revocation.union(&gone).cloned().collect();
    next.assigned = keep;
    if owns_revoked(owned, &pending) {
        next.state = CgState::UnrevokedPartitions;
        next.pending_revocation = pending;
    } else {
        for tp in &gone {
            next.epochs.remove(tp);
        }
    }
    next
}

/// `CurrentAssignmentBuilder.computeNextAssignment`: keep what is still targeted; what is not
/// goes to pending revocation (the member stays in `member_epoch` until it acknowledges);
/// targeted partitions no other member holds are added and the member moves to the target
/// epoch; targeted partitions still held elsewhere wait (UNRELEASED_PARTITIONS). From 4.2 on the
/// target of a topic the member no longer subscribes to counts as empty (KAFKA-19431). Added
/// partitions get the target epoch as their assignment epoch, kept and revoked ones keep theirs.
fn compute_next_assignment(
    c: &ConsumerGroup,
    member_id: &str,
    member_epoch: i32,
    target_epoch: i32,
    owned: Option<&BTreeSet<Tp>>,
    profile: BrokerProfile,
) -> ConsumerMemberState {
    let m = &c.members[member_id];
    let mut target: BTreeSet<Tp> = c.target_of(member_id).unwrap_or_default();
    if profile.subscription_consistency() {
        target.retain(|(t, _)| m.topics.contains(t));
    }
    let assigned: BTreeSet<Tp> = m.assigned.intersection(&target).cloned().collect();
    let revoke: BTreeSet<Tp> = m.assigned.difference(&assigned).cloned().collect();
    let mut unreleased = false;
    let mut add = BTreeSet::new();
    for tp in target.difference(&assigned) {
        // A partition this member still holds as pending revocation is not "unreleased"
        // (KAFKA-19449, on every 4.x branch); `tp` is not among its assigned partitions, so any
        // other holder is another member.
        if !m.pending_revocation.contains(tp) && c.is_held(tp) {
            unreleased = true;
        } else {
            add.insert(tp.clone());
        }
    }
    let mut next = m.clone();
    if !revoke.is_empty() && owns_revoked(owned, &revoke) {
        next.state = CgState::UnrevokedPartitions;
        next.update_epoch(member_epoch);
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
        for tp in &add {
            next.epochs.insert(tp.clone(), target_epoch);
        }
    }
    next.epochs
        .retain(|tp, _| next.assigned.contains(tp) || next.pending_revocation.contains(tp));
    next
}

fn fmt_tps(tps: &BTreeSet<Tp>) -> String {
    let v: Vec<String> = tps.iter().map(|(t, p)| format!("{t}-{p}")).collect();
    format!("[{}]", v.join(","))
}

impl ConsumerGroup {
    /// Whether `other` holds the same records (everything but the change tracking): an
    /// operation that leaves the group so wrote no record.
    pub(super) fn same_records(&self, other: &ConsumerGroup) -> bool {
        self.epoch == other.epoch
            && self.assignment_epoch == other.assignment_epoch
            && self.members == other.members
            && self.static_members == other.static_members
            && self.target == other.target
            && self.assignment_time == other.assignment_time
    }

    /// The group put back in place of `replaced` (a reverted write, or a load): every member of
    /// either counts as changed.
    pub(super) fn restored(mut self, replaced: Option<&ConsumerGroup>) -> ConsumerGroup {
        let ids: Vec<String> = self
            .members
            .keys()
            .chain(replaced.into_iter().flat_map(|r| r.members.keys()))
            .cloned()
            .collect();
        if let Some(r) = replaced {
            self.changed.extend(r.changed.iter().cloned());
        }
        self.changed.extend(ids);
        self
    }
}

impl SimCoordinator {
    /// `GroupMetadataManager.onLoaded` for a consumer group: every member's session timeout,
    /// and the rebalance timeout of the members revoking partitions.
    pub(super) fn consumer_on_loaded(&mut self) {
        let Some(c) = &self.consumer else {
            return;
        };
        let now = self.now;
        let session = self.config.consumer_session_timeout;
        let members: Vec<(String, i32, i32, CgState)> = c
            .members
            .iter()
            .map(|(id, m)| (id.clone(), m.epoch, m.rebalance_timeout_ms, m.state))
            .collect();
        for (id, epoch, timeout, state) in members {
            self.consumer_sessions.insert(id.clone(), now + session, ());
            if state == CgState::UnrevokedPartitions && timeout >= 0 {
                let at = now + Duration::from_millis(timeout as u64);
                self.consumer_rebalance_timeouts.insert(id, at, epoch);
            }
        }
    }
}
