//! The state of one streams group (`streams/StreamsGroup.java`, `streams/StreamsGroupMember.java`)
//! and its task ownership index (`StreamsGroup.currentActiveTaskProcessId`,
//! `currentStandbyTaskProcessIds`, `currentWarmupTaskProcessIds`, maintained by
//! `maybeUpdateTaskProcessId` / `removeTaskProcessIds` / `addTaskProcessId`).

use std::collections::{BTreeMap, BTreeSet};

use super::OwnershipIndex;
use super::topology::{Configured, Topology};

/// A task: subtopology id and partition.
pub(crate) type TaskId = (String, i32);

/// Active, standby and warm-up tasks (`TasksTuple`; active-task epochs are not modelled).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Tasks {
    pub(crate) active: BTreeSet<TaskId>,
    pub(crate) standby: BTreeSet<TaskId>,
    pub(crate) warmup: BTreeSet<TaskId>,
}

impl Tasks {
    pub(crate) fn is_empty(&self) -> bool {
        self.active.is_empty() && self.standby.is_empty() && self.warmup.is_empty()
    }

    /// `TasksTuple.containsAny`: a task of `other` in the same role here.
    pub(crate) fn contains_any(&self, other: &Tasks) -> bool {
        !self.active.is_disjoint(&other.active)
            || !self.standby.is_disjoint(&other.standby)
            || !self.warmup.is_disjoint(&other.warmup)
    }

    /// `TasksTuple.merge`.
    pub(crate) fn merge(&self, other: &Tasks) -> Tasks {
        Tasks {
            active: self.active.union(&other.active).cloned().collect(),
            standby: self.standby.union(&other.standby).cloned().collect(),
            warmup: self.warmup.union(&other.warmup).cloned().collect(),
        }
    }
}

/// `streams/MemberTaskOffsets.java`: the cumulative changelog offsets and end offsets a member
/// last reported, per task (transient: not persisted, `StreamsGroup.taskOffsets`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct MemberTaskOffsets {
    pub(crate) offsets: BTreeMap<TaskId, i64>,
    pub(crate) end_offsets: BTreeMap<TaskId, i64>,
}

impl MemberTaskOffsets {
    /// `MemberTaskOffsets.update`: a list not sent (`None`) leaves its map as it was; a sent
    /// list replaces it (`toNestedMap`: a duplicate (subtopology, partition) is refused).
    pub(crate) fn update(
        &self,
        offsets: Option<BTreeMap<TaskId, i64>>,
        end_offsets: Option<BTreeMap<TaskId, i64>>,
    ) -> Self {
        Self {
            offsets: offsets.unwrap_or_else(|| self.offsets.clone()),
            end_offsets: end_offsets.unwrap_or_else(|| self.end_offsets.clone()),
        }
    }

    /// The lag `end - offset` of `t` if both were reported.
    pub(crate) fn lag(&self, t: &TaskId) -> Option<i64> {
        let (o, e) = (self.offsets.get(t)?, self.end_offsets.get(t)?);
        Some(e.saturating_sub(*o))
    }
}

/// `streams/MemberState.java`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemberState {
    /// Reconciled to its epoch, or nothing to wait for.
    Stable,
    /// Waiting for the member to report the tasks pending revocation released.
    UnrevokedTasks,
    /// In the target epoch, waiting for tasks another member still holds.
    UnreleasedTasks,
}

impl MemberState {
    pub(crate) fn name(self) -> &'static str {
        match self {
            MemberState::Stable => "STABLE",
            MemberState::UnrevokedTasks => "UNREVOKED_TASKS",
            MemberState::UnreleasedTasks => "UNRELEASED_TASKS",
        }
    }
}

/// `StreamsGroupMember`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Member {
    pub(crate) member_id: String,
    pub(crate) instance_id: Option<String>,
    pub(crate) rack_id: Option<String>,
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    pub(crate) rebalance_timeout_ms: i32,
    pub(crate) topology_epoch: i32,
    pub(crate) process_id: String,
    pub(crate) client_tags: BTreeMap<String, String>,
    pub(crate) user_endpoint: Option<(String, u16)>,
    pub(crate) epoch: i32,
    pub(crate) previous_epoch: i32,
    pub(crate) state: MemberState,
    pub(crate) assigned: Tasks,
    pub(crate) pending_revocation: Tasks,
}

impl Member {
    /// `StreamsGroupMember.Builder.withDefaults`.
    pub(crate) fn with_defaults(member_id: &str) -> Self {
        Self {
            member_id: member_id.to_owned(),
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            rebalance_timeout_ms: -1,
            topology_epoch: -1,
            process_id: String::new(),
            client_tags: BTreeMap::new(),
            user_endpoint: None,
            epoch: 0,
            previous_epoch: 0,
            state: MemberState::Stable,
            assigned: Tasks::default(),
            pending_revocation: Tasks::default(),
        }
    }

    /// `StreamsGroupMember.isReconciledTo`.
    pub(crate) fn is_reconciled_to(&self, assignment_epoch: i32) -> bool {
        self.state == MemberState::Stable && self.epoch == assignment_epoch
    }

    /// Epoch, previous epoch and state as `updateMemberEpoch` + `setState` set them.
    pub(crate) fn with_epoch(mut self, epoch: i32, state: MemberState) -> Self {
        self.previous_epoch = self.epoch;
        self.epoch = epoch;
        self.state = state;
        self
    }
}

/// `StreamsGroup.StreamsGroupState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupState {
    Empty,
    NotReady,
    Assigning,
    Reconciling,
    Stable,
}

impl GroupState {
    pub(crate) fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::NotReady => "NotReady",
            GroupState::Assigning => "Assigning",
            GroupState::Reconciling => "Reconciling",
            GroupState::Stable => "Stable",
        }
    }
}

/// Who holds a task in one role: per member, its process.
type Holders = BTreeMap<TaskId, BTreeMap<String, String>>;

/// The task ownership index the reconciler consults before granting a task.
///
/// Both the broker's view (a process id per active task, a set of process ids per standby /
/// warm-up task) and the members that hold each task are kept; [`OwnershipIndex`] selects
/// which one answers the reconciler's questions.
#[derive(Debug, Clone)]
pub(crate) struct Ownership {
    kind: OwnershipIndex,
    /// `currentActiveTaskToProcessId`.
    active_process: BTreeMap<TaskId, String>,
    /// `currentStandbyTaskToProcessIds`.
    standby_processes: BTreeMap<TaskId, BTreeSet<String>>,
    /// `currentWarmupTaskToProcessIds`.
    warmup_processes: BTreeMap<TaskId, BTreeSet<String>>,
    active_holders: Holders,
    standby_holders: Holders,
    warmup_holders: Holders,
}

impl Ownership {
    pub(crate) fn new(kind: OwnershipIndex) -> Self {
        Self {
            kind,
            active_process: BTreeMap::new(),
            standby_processes: BTreeMap::new(),
            warmup_processes: BTreeMap::new(),
            active_holders: Holders::new(),
            standby_holders: Holders::new(),
            warmup_holders: Holders::new(),
        }
    }

    /// `StreamsGroup.maybeUpdateTaskProcessId`: the old state of a member leaves the index
    /// (its assigned tasks and its tasks pending revocation), the new one enters it.
    fn update(&mut self, old: Option<&Member>, new: Option<&Member>) {
        if let Some(old) = old {
            for tasks in [&old.assigned, &old.pending_revocation] {
                self.remove(&old.member_id, &old.process_id, tasks);
            }
        }
        if let Some(new) = new {
            for tasks in [&new.assigned, &new.pending_revocation] {
                self.add(&new.member_id, &new.process_id, tasks);
            }
        }
    }

    /// `StreamsGroup.removeTaskProcessIds`.
    fn remove(&mut self, member: &str, process: &str, tasks: &Tasks) {
        for t in &tasks.active {
            // `removeTaskProcessIds` (active): removed only if the task is still recorded at
            // this process.
            if self.active_process.get(t).is_some_and(|p| p == process) {
                self.active_process.remove(t);
            }
        }
        for (set, role) in [
            (&mut self.standby_processes, &tasks.standby),
            (&mut self.warmup_processes, &tasks.warmup),
        ] {
            for t in role {
                // `removeTaskProcessIdsFromSet`: the PROCESS leaves the task's set when ONE of
                // its members stops holding the task, whether or not another member of the
                // same process still holds it. This is KAFKA-21401 (`OwnershipIndex::PerProcess`).
                if let Some(procs) = set.get_mut(t) {
                    procs.remove(process);
                    if procs.is_empty() {
                        set.remove(t);
                    }
                }
            }
        }
        for (holders, set) in [
            (&mut self.active_holders, &tasks.active),
            (&mut self.standby_holders, &tasks.standby),
            (&mut self.warmup_holders, &tasks.warmup),
        ] {
            for t in set {
                if let Some(h) = holders.get_mut(t) {
                    h.remove(member);
                    if h.is_empty() {
                        holders.remove(t);
                    }
                }
            }
        }
    }

    /// `StreamsGroup.addTaskProcessId`.
    fn add(&mut self, member: &str, process: &str, tasks: &Tasks) {
        for t in &tasks.active {
            // `addTaskProcessIdFromActiveTasksWithEpochs`: the last writer wins.
            self.active_process.insert(t.clone(), process.to_owned());
        }
        for t in &tasks.standby {
            self.standby_processes
                .entry(t.clone())
                .or_default()
                .insert(process.to_owned());
        }
        for t in &tasks.warmup {
            self.warmup_processes
                .entry(t.clone())
                .or_default()
                .insert(process.to_owned());
        }
        for (holders, set) in [
            (&mut self.active_holders, &tasks.active),
            (&mut self.standby_holders, &tasks.standby),
            (&mut self.warmup_holders, &tasks.warmup),
        ] {
            for t in set {
                holders
                    .entry(t.clone())
                    .or_default()
                    .insert(member.to_owned(), process.to_owned());
            }
        }
    }

    /// `currentActiveTaskProcessId(task) != null`.
    pub(crate) fn active_owned(&self, t: &TaskId) -> bool {
        match self.kind {
            OwnershipIndex::PerProcess => self.active_process.contains_key(t),
            OwnershipIndex::PerMember => self.active_holders.contains_key(t),
        }
    }

    /// `Objects.equals(currentActiveTaskProcessId(task), process)`.
    pub(crate) fn active_on(&self, t: &TaskId, process: &str) -> bool {
        match self.kind {
            OwnershipIndex::PerProcess => self.active_process.get(t).is_some_and(|p| p == process),
            OwnershipIndex::PerMember => held_on(&self.active_holders, t, process),
        }
    }

    /// `currentStandbyTaskProcessIds(task).contains(process)`.
    pub(crate) fn standby_on(&self, t: &TaskId, process: &str) -> bool {
        match self.kind {
            OwnershipIndex::PerProcess => self
                .standby_processes
                .get(t)
                .is_some_and(|s| s.contains(process)),
            OwnershipIndex::PerMember => held_on(&self.standby_holders, t, process),
        }
    }

    /// `currentWarmupTaskProcessIds(task).contains(process)`.
    pub(crate) fn warmup_on(&self, t: &TaskId, process: &str) -> bool {
        match self.kind {
            OwnershipIndex::PerProcess => self
                .warmup_processes
                .get(t)
                .is_some_and(|s| s.contains(process)),
            OwnershipIndex::PerMember => held_on(&self.warmup_holders, t, process),
        }
    }

    /// Standby / warm-up holdings the per-process index has lost: (task, process) pairs some
    /// member of the process holds while the process is missing from the task's set. Always
    /// empty with [`OwnershipIndex::PerMember`] semantics; what KAFKA-21401 leaves behind.
    pub(crate) fn lost_entries(&self) -> Vec<(TaskId, String)> {
        let mut lost = BTreeSet::new();
        for (holders, procs) in [
            (&self.standby_holders, &self.standby_processes),
            (&self.warmup_holders, &self.warmup_processes),
        ] {
            for (t, h) in holders {
                for p in h.values() {
                    if !procs.get(t).is_some_and(|s| s.contains(p)) {
                        lost.insert((t.clone(), p.clone()));
                    }
                }
            }
        }
        lost.into_iter().collect()
    }
}

fn held_on(holders: &Holders, t: &TaskId, process: &str) -> bool {
    holders
        .get(t)
        .is_some_and(|h| h.values().any(|p| p == process))
}

/// `StreamsGroup`: members, static members, target assignment, epochs, topology.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    pub(crate) members: BTreeMap<String, Member>,
    /// `staticMembers`: instance id -> member id.
    pub(crate) static_members: BTreeMap<String, String>,
    /// `targetAssignment`, by member id.
    pub(crate) target: BTreeMap<String, Tasks>,
    pub(crate) group_epoch: i32,
    pub(crate) assignment_epoch: i32,
    pub(crate) topology: Option<Topology>,
    pub(crate) configured: Option<Configured>,
    /// What the metadata hash is computed from: partition counts of the topology's topics
    /// that exist (`computeMetadataHash`), as of the last group epoch bump.
    pub(crate) metadata: BTreeMap<String, i32>,
    pub(crate) validated_topology_epoch: i32,
    /// `lastAssignmentConfigs`: `num.standby.replicas` of the last group epoch bump.
    pub(crate) last_num_standby_replicas: Option<u32>,
    pub(crate) endpoint_information_epoch: i32,
    pub(crate) shutdown_requester: Option<String>,
    pub(crate) index: Ownership,
    /// `StreamsGroup.taskOffsets`: the last task offsets each member reported (not persisted).
    pub(crate) task_offsets: BTreeMap<String, MemberTaskOffsets>,
    /// `StreamsGroup.refinedAssignment`: the intermediate assignment derived for an assignment
    /// epoch (`RefinedAssignment(assignmentEpoch, assignment)`), frozen for that epoch.
    pub(crate) refined: Option<(i32, BTreeMap<String, Tasks>)>,
}

impl Group {
    pub(crate) fn new(kind: OwnershipIndex) -> Self {
        Self {
            members: BTreeMap::new(),
            static_members: BTreeMap::new(),
            target: BTreeMap::new(),
            group_epoch: 0,
            assignment_epoch: 0,
            topology: None,
            configured: None,
            metadata: BTreeMap::new(),
            validated_topology_epoch: -1,
            last_num_standby_replicas: None,
            endpoint_information_epoch: 0,
            shutdown_requester: None,
            index: Ownership::new(kind),
            task_offsets: BTreeMap::new(),
            refined: None,
        }
    }

    /// `StreamsGroup.staticMember`.
    pub(crate) fn static_member(&self, instance_id: &str) -> Option<&Member> {
        self.static_members
            .get(instance_id)
            .and_then(|id| self.members.get(id))
    }

    /// `StreamsGroup.updateMember` (the replay of a member or current-assignment record).
    pub(crate) fn put_member(&mut self, member: Member) {
        let old = self
            .members
            .insert(member.member_id.clone(), member.clone());
        self.index.update(old.as_ref(), Some(&member));
        // `updateStaticMember`.
        if let Some(inst) = old.as_ref().and_then(|o| o.instance_id.as_ref()) {
            self.static_members.remove(inst);
        }
        if let Some(inst) = &member.instance_id {
            self.static_members
                .insert(inst.clone(), member.member_id.clone());
        }
    }

    /// `StreamsGroup.removeMember` (with the target assignment tombstone).
    pub(crate) fn remove_member(&mut self, member_id: &str) -> Option<Member> {
        let old = self.members.remove(member_id)?;
        self.index.update(Some(&old), None);
        if let Some(inst) = &old.instance_id {
            if self
                .static_members
                .get(inst)
                .is_some_and(|m| m == member_id)
            {
                self.static_members.remove(inst);
            }
        }
        self.target.remove(member_id);
        // `StreamsGroup.removeMember`: `taskOffsets.remove(memberId)`.
        self.task_offsets.remove(member_id);
        if self.members.is_empty() {
            self.shutdown_requester = None;
        }
        Some(old)
    }

    /// `StreamsGroup.refinedAssignment(int)`: the cached intermediate assignment, only for the
    /// epoch it was derived for.
    pub(crate) fn refined_for(&self, assignment_epoch: i32) -> Option<&BTreeMap<String, Tasks>> {
        self.refined
            .as_ref()
            .filter(|(e, _)| *e == assignment_epoch)
            .map(|(_, a)| a)
    }

    /// `StreamsGroup.relabelRefinedAssignment`: a replacing static member takes over the
    /// replaced member's slice of the cached intermediate assignment, epoch unchanged.
    pub(crate) fn relabel_refined(&mut self, old: &str, new: &str) {
        if let Some((_, a)) = self.refined.as_mut() {
            if let Some(t) = a.remove(old) {
                a.insert(new.to_owned(), t);
            }
        }
    }

    /// `StreamsGroup.maybeUpdateGroupState`.
    pub(crate) fn state(&self) -> GroupState {
        if self.members.is_empty() {
            GroupState::Empty
        } else if self
            .topology
            .as_ref()
            .is_none_or(|t| t.epoch != self.validated_topology_epoch)
        {
            GroupState::NotReady
        } else if self.group_epoch > self.assignment_epoch {
            GroupState::Assigning
        } else if self
            .members
            .values()
            .any(|m| !m.is_reconciled_to(self.assignment_epoch))
        {
            GroupState::Reconciling
        } else {
            GroupState::Stable
        }
    }
}
