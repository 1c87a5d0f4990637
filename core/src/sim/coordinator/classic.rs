//! Classic group rules (apache/kafka group-coordinator, `GroupMetadataManager.java` and
//! `classic/ClassicGroup.java`; each branch names its method):
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
//! - Records (`GroupCoordinatorRecordHelpers.newGroupMetadataRecord`, loaded by
//!   `ClassicGroup.fromRecord`): written for a new group, an empty generation, a static
//!   replacement in Stable and the leader's assignment, never when a rebalance of a non-empty
//!   group completes; failed appends (`appendFuture` callbacks) and unload (`onUnloaded`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, ResponseKind, SyncGroupRequest, SyncGroupResponse,
};
use rand::RngCore;

use super::log::Record;
use super::{Append, Parked, SimCoordinator, ms, name, s};
use crate::sim::codes::*;

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

impl fmt::Display for GroupState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A classic member (`ClassicGroupMember`).
#[derive(Debug, Clone)]
pub(super) struct ClassicMemberState {
    pub(super) member_id: String,
    pub(super) instance_id: Option<String>,
    rebalance_timeout_ms: i32,
    session_timeout_ms: i32,
    protocol_type: String,
    protocols: Vec<(String, Bytes)>,
    pub(super) assignment: Bytes,
    pub(super) awaiting_join: Option<Parked>,
    pub(super) awaiting_sync: Option<Parked>,
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
pub(super) enum JoinTimer {
    /// `tryCompleteInitialRebalanceElseSchedule(delay, remaining)`.
    Initial {
        delay: Duration,
        remaining: Duration,
    },
    /// `completeClassicGroupJoin`.
    Complete,
}

/// A classic group (`ClassicGroup`).
#[derive(Debug, Clone)]
pub(super) struct ClassicGroup {
    pub(super) state: GroupState,
    previous_state: GroupState,
    pub(super) generation: i32,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    pub(super) leader: Option<String>,
    pub(super) members: BTreeMap<String, ClassicMemberState>,
    pub(super) static_members: BTreeMap<String, String>,
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
    pub(super) fn validate_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), i16> {
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

    /// The group as `ClassicGroup.fromRecord` loads the `GroupMetadataValue` that
    /// `newGroupMetadataRecord(group, assignment)` writes now: Stable (Empty without members)
    /// at this generation, protocol and leader, the members with their protocols, timeouts and
    /// `assignment` (their current one when `None`); no parked futures, no pending members.
    pub(super) fn record(&self, assignment: Option<&BTreeMap<String, Bytes>>) -> ClassicGroup {
        let mut g = self.clone();
        g.state = if g.members.is_empty() {
            GroupState::Empty
        } else {
            GroupState::Stable
        };
        g.previous_state = GroupState::Empty;
        g.pending_join.clear();
        g.pending_sync.clear();
        g.new_member_added = false;
        g.static_members.clear();
        for (id, m) in g.members.iter_mut() {
            m.awaiting_join = None;
            m.awaiting_sync = None;
            m.is_new = false;
            if let Some(a) = assignment {
                m.assignment = a.get(id).cloned().unwrap_or_default();
            }
            if let Some(i) = &m.instance_id {
                g.static_members.insert(i.clone(), id.clone());
            }
        }
        g
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

impl SimCoordinator {
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
    pub(super) fn join(&mut self, p: Parked, client_id: &str, r: JoinGroupRequest) {
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
            // classicGroupJoin: a new group writes its empty metadata record.
            self.write_record(Record::Classic(Box::new(self.g().record(None))));
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
        let old = self.g().members.get(&old_id).cloned();
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
                    let record = self.g().record(None);
                    self.write_record(Record::Classic(Box::new(record)));
                    if let Some(old) = old {
                        self.appends.push_back((
                            self.now,
                            Append::StaticReplacement {
                                member_id: new_id,
                                generation: self.g().generation,
                                old: Box::new(old),
                                current_leader,
                                skip_assignment: p.version >= 9,
                            },
                        ));
                    }
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
    pub(super) fn try_complete_initial_rebalance(&mut self, delay: Duration, remaining: Duration) {
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
    pub(super) fn complete_join(&mut self) {
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
            // The empty generation is written (its append failing changes nothing).
            let record = self.g().record(None);
            self.write_record(Record::Classic(Box::new(record)));
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
    pub(super) fn reschedule_heartbeat(&mut self, member_id: &str, timeout: Option<Duration>) {
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
    pub(super) fn expire_heartbeat(&mut self, member_id: &str) {
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
        self.remove_answering_join(member_id);
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
    pub(super) fn sync(&mut self, p: Parked, r: SyncGroupRequest) {
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
                    let record = self.g().record(Some(&assignment));
                    self.write_record(Record::Classic(Box::new(record)));
                    self.appends.push_back((
                        self.now,
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
    pub(super) fn expire_pending_sync(&mut self, generation: i32) {
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

    /// `classicGroupSync`'s appendFuture for the leader's assignment completed.
    pub(super) fn sync_assignment_committed(
        &mut self,
        generation: i32,
        assignment: BTreeMap<String, Bytes>,
    ) {
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

    /// `classicGroupSync`'s appendFuture for the leader's assignment failed (or timed out): if
    /// the group still waits for that assignment, every parked SyncGroup gets the error with an
    /// empty assignment and the group rebalances (`resetAndPropagateAssignmentWithError`,
    /// `maybePrepareRebalanceOrCompleteJoin`).
    pub(super) fn sync_assignment_failed(&mut self, generation: i32, code: i16) {
        let Some(g) = self.classic.as_ref() else {
            return;
        };
        if g.state == GroupState::CompletingRebalance && g.generation == generation {
            self.note(|| {
                format!(
                    "storing the assignment of generation {generation} failed: {}; rebalance",
                    name(code)
                )
            });
            self.reset_and_propagate_assignment_with_error(code);
            self.maybe_prepare_rebalance_or_complete_join("error storing the group assignment");
        }
    }

    /// `updateStaticMemberThenRebalanceOrCompleteJoin`'s appendFuture failed (or timed out):
    /// the replacement is reverted (the old member id gets the member back, with its protocols
    /// and timeouts: `updateMember(..., null)`, `replaceStaticMember(instance, new, old)`) and the
    /// new member's JoinGroup is answered with an empty member id and the error.
    pub(super) fn static_replacement_failed(
        &mut self,
        new_id: &str,
        generation: i32,
        old: ClassicMemberState,
        current_leader: Option<String>,
        code: i16,
    ) {
        let Some(g) = self.classic.as_mut() else {
            return;
        };
        let Some(mut m) = g.members.remove(new_id) else {
            return;
        };
        let parked = m.awaiting_join.take();
        m.member_id = old.member_id.clone();
        m.protocols = old.protocols;
        m.rebalance_timeout_ms = old.rebalance_timeout_ms;
        m.session_timeout_ms = old.session_timeout_ms;
        if let Some(i) = &m.instance_id {
            g.static_members.insert(i.clone(), old.member_id.clone());
        }
        if g.is_leader(new_id) {
            g.leader = Some(old.member_id.clone());
        }
        g.members.insert(old.member_id.clone(), m);
        self.reschedule_heartbeat(&old.member_id, None);
        let old_id = old.member_id;
        self.note(|| {
            format!(
                "persisting static member {new_id} failed: {}; reverted to {old_id}",
                name(code)
            )
        });
        if (parked.is_none() || self.g().generation != generation)
            && let Some(i) = self.g().members[&old_id].instance_id.clone()
        {
            // A rebalance answered the new member id meanwhile (its join is no longer parked,
            // or a later one is); the revert takes the instance id from under it all the same.
            self.note(|| format!("{new_id} was already answered: it will be fenced"));
            self.reverted.push((i, new_id.to_owned()));
        }
        if let Some(p) = parked {
            let g = self.g();
            let body = match Self::join_ok(g, p, "", Vec::new(), current_leader.as_deref(), false) {
                ResponseKind::JoinGroup(r) => ResponseKind::JoinGroup(r.with_error_code(code)),
                other => other,
            };
            self.reply(p, body);
        }
    }

    /// `classicGroupJoin`'s appendFuture for a new group's empty record failed: the group's
    /// creation is reverted (the group map is a timeline structure) and the JoinGroup that
    /// created it, still parked, is answered with the error.
    pub(super) fn classic_creation_failed(&mut self, code: i16) {
        let Some(g) = self.classic.take() else {
            return;
        };
        for (id, m) in g.members {
            self.heartbeats.remove(&id);
            if let Some(p) = m.awaiting_join {
                self.reply(p, Self::join_error(p, "", code));
            }
        }
        for id in g.pending_join {
            self.heartbeats.remove(&id);
        }
        self.join_timer = None;
    }

    /// `GroupMetadataManager.onUnloaded`: the group turns Dead; parked JoinGroups (the group was
    /// preparing a rebalance) or parked SyncGroups (completing a rebalance, or stable) are
    /// answered NOT_COORDINATOR.
    pub(super) fn classic_unloaded(&mut self) {
        let Some(g) = self.classic.as_mut() else {
            return;
        };
        g.transition(GroupState::Dead);
        let previous = g.previous_state;
        let ids: Vec<String> = g.members.keys().cloned().collect();
        for id in ids {
            let m = self.group().members.get_mut(&id).expect("member");
            match previous {
                GroupState::PreparingRebalance => {
                    if let Some(p) = m.awaiting_join.take() {
                        self.reply(p, Self::join_error(p, &id, NOT_COORDINATOR));
                    }
                }
                GroupState::CompletingRebalance | GroupState::Stable => {
                    if let Some(p) = m.awaiting_sync.take() {
                        self.reply(p, Self::sync_error(NOT_COORDINATOR));
                    }
                }
                GroupState::Empty | GroupState::Dead => {}
            }
        }
    }

    /// `updateStaticMemberThenRebalanceOrCompleteJoin`'s appendFuture completed.
    pub(super) fn static_replacement_committed(
        &mut self,
        member_id: String,
        current_leader: Option<String>,
        skip_assignment: bool,
    ) {
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

    // ------------------------------------------------------------------ classic: Heartbeat

    /// `classicGroupHeartbeat` / `validateClassicGroupHeartbeat`.
    pub(super) fn heartbeat(&mut self, p: Parked, r: HeartbeatRequest) {
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
    pub(super) fn leave(&mut self, p: Parked, r: LeaveGroupRequest) {
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

    /// Removes the member from the group; its parked join is answered UNKNOWN_MEMBER_ID
    /// (`removeMemberAndUpdateClassicGroup`, `removeCurrentMemberFromClassicGroup`).
    fn remove_answering_join(&mut self, member_id: &str) {
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

    /// `removeCurrentMemberFromClassicGroup`: a parked join is answered UNKNOWN_MEMBER_ID.
    fn remove_current_member(&mut self, member_id: &str) {
        self.heartbeats.remove(member_id);
        self.remove_answering_join(member_id);
    }
}

fn inconsistent(request: Option<&str>, group: Option<&str>) -> bool {
    matches!((request, group), (Some(a), Some(b)) if a != b)
}
