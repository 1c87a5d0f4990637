//! The invariants the world checks after every step (see [`World::violations`] and
//! [`World::hazards`]), and the bookkeeping they read:
//! - no FENCED_INSTANCE_ID reaches a process unless another process holds its instance id
//!   (classic: alive or processed after it started; KIP-848: the instance id was held by a
//!   member id the process never used);
//! - classic: a member's generation never goes backwards under one member id, and no partition
//!   is owned by two live members of one generation;
//! - KIP-848: the member epoch only drops to 0, no partition is owned by two live members (a
//!   zombie aside), a member owns only what the coordinator assigned to it or awaits it to
//!   revoke, and the coordinator's own state is consistent;
//! - hazards: a stale heartbeat, processed after a later one, that released partitions the
//!   member still owns.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::{RequestKind, ResponseKind};

use super::ConnId;
use super::coordinator;
#[cfg(doc)]
use super::coordinator::SimCoordinator;
use super::network::Queued;
use super::world::{Action, World, fmt_partitions};
use crate::config::GroupProtocol;
use crate::machine::TopicPartition;
#[cfg(doc)]
use crate::machine::events::Event;
use crate::machine::events::MemberState;
use crate::machine::streams::{StreamsTasks, TaskId, TaskRole};
use crate::request::{RequestBody, ResponseBody};

/// What the invariants read from a live member, refreshed after the steps that touch it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Snapshot {
    protocol: GroupProtocol,
    member_id: String,
    generation: i32,
    state: MemberState,
    owned: Vec<TopicPartition>,
    /// Partitions of revocation tickets the application still holds.
    revoking: Vec<TopicPartition>,
    /// A streams member: what the streams invariants read.
    streams: Option<StreamsSnapshot>,
}

/// What the streams invariants read from a live streams member.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct StreamsSnapshot {
    /// Its process id (the task guard it shares with the other members of its process).
    process_id: String,
    /// Whether that process's guard is on.
    guarded: bool,
    /// The tasks the application holds, by role (active tasks of an outstanding revocation
    /// ticket included).
    tasks: StreamsTasks,
}

impl World {
    /// A ConsumerGroupHeartbeat (a leave too) of a live process, processed after one the process
    /// sent later (it was still buffered on a connection the process had closed): the process
    /// and the request's epoch. Notes the heartbeat as processed.
    pub(super) fn stale_heartbeat(&mut self, q: &Queued) -> Option<(usize, i32)> {
        let RequestBody::Kafka(RequestKind::ConsumerGroupHeartbeat(r)) = &q.frame.body else {
            return None;
        };
        let p = self.proc_of_conn(q.conn)?;
        let corr = q.frame.correlation;
        let latest = self.procs[p].heartbeat_processed;
        self.procs[p].heartbeat_processed = latest.max(corr);
        self.procs[p].member.as_ref()?;
        (corr < latest).then_some((p, r.member_epoch))
    }

    /// After a stale heartbeat of process `p`: partitions it owns that the coordinator no longer
    /// holds for it were released on the stale request's owned partitions (see [`Self::hazards`]).
    pub(super) fn note_stale_ack(&mut self, p: usize, epoch: i32) {
        let Some(m) = self.procs[p].member.as_deref() else {
            return;
        };
        let id = m.member_id();
        let current = m.generation();
        let mut owned: BTreeSet<TopicPartition> = m.assignment().into_iter().collect();
        owned.extend(self.procs[p].revoking.values().flatten().cloned());
        let released: Vec<TopicPartition> = owned
            .into_iter()
            .filter(|tp| {
                self.coordinator
                    .consumer_member_holds(&id, &tp.topic, tp.partition)
                    == Some(false)
            })
            .collect();
        if released.is_empty() {
            return;
        }
        let msg = format!(
            "{:?}: a heartbeat {} sent at epoch {epoch} was processed after a later one (the member is at epoch {current}); the coordinator took its stale owned partitions as the revocation of {} (throwIfConsumerGroupMemberEpochIsInvalid accepts the epoch, ownsRevokedPartitions the owned set), which {} still owns",
            self.elapsed(),
            self.procs[p].name,
            fmt_partitions(&released),
            self.procs[p].name
        );
        self.log(|| format!("!! HAZARD {msg}"));
        self.hazards.push(msg);
        self.procs[p].stale_acked.extend(released);
        self.stale_procs.insert(p);
        self.recheck.insert(p);
    }

    /// A KIP-848 instance-id conflict is answered at once, so the coordinator's instance map
    /// now is the one the answer came from: remember who held the instance id.
    /// The same for a streams group's StreamsGroupHeartbeat.
    pub(super) fn note_instance_conflict(&mut self, r: &coordinator::Reply) {
        let (code, streams) = match &r.body {
            ResponseBody::Kafka(ResponseKind::ConsumerGroupHeartbeat(body)) => {
                (body.error_code, false)
            }
            ResponseBody::StreamsGroupHeartbeat(body) => (body.error_code, true),
            _ => return,
        };
        if !matches!(
            code,
            super::codes::FENCED_INSTANCE_ID | super::codes::UNRELEASED_INSTANCE_ID
        ) {
            return;
        }
        let Some(p) = self.proc_of_conn(r.conn) else {
            return;
        };
        let instance = self.procs[p].instance_id.clone();
        let holder = instance.and_then(|instance| {
            if streams {
                let group = &self.coordinator.config().group_id;
                self.coordinator
                    .streams()
                    .members(group)
                    .into_iter()
                    .find(|m| m.instance_id.as_deref() == Some(instance.as_str()))
                    .map(|m| m.member_id)
            } else {
                self.coordinator.static_member(&instance).map(str::to_owned)
            }
        });
        self.procs[p]
            .conflicts
            .insert((r.conn, r.correlation), (code, holder));
    }

    /// A KIP-848 FENCED_INSTANCE_ID / UNRELEASED_INSTANCE_ID reached process `p`: legitimate when
    /// the instance id was held by a member id this process never used (another process's);
    /// held by one of its own ids, FENCED_INSTANCE_ID is self-fencing.
    pub(super) fn check_instance_conflict(&mut self, p: usize, key: (ConnId, i32), code: i16) {
        let Some((_, holder)) = self.procs[p].conflicts.remove(&key) else {
            return;
        };
        let own = holder
            .as_ref()
            .is_some_and(|h| self.procs[p].member_ids.contains_key(h));
        if code == super::codes::UNRELEASED_INSTANCE_ID {
            self.procs[p].unreleased_elsewhere = !own;
        } else if own {
            let msg = format!(
                "{:?}: FENCED_INSTANCE_ID reached {} while its instance id was held by its own member id {} (self-fencing)",
                self.elapsed(),
                self.procs[p].name,
                holder.unwrap_or_default()
            );
            self.log(|| format!("!! VIOLATION {msg}"));
            self.violations.push(msg);
        }
    }

    /// FENCED_INSTANCE_ID reached process `p`: legitimate only if another process with the same
    /// instance id is alive, or had a request processed after `p` started.
    pub(super) fn check_fence(&mut self, p: usize) {
        let me = &self.procs[p];
        let Some(instance) = me.instance_id.clone() else {
            self.violations.push(format!(
                "{:?}: FENCED_INSTANCE_ID reached dynamic member {}",
                self.elapsed(),
                me.name
            ));
            return;
        };
        let legit = self.instance_held_elsewhere(p, &instance) || self.registration_reverted(p);
        // A coordinator that took over since the process started loads the last committed
        // registration of the instance id, which may name an earlier process's member id: the
        // broker writes no record for a static replacement made during a rebalance
        // (GroupMetadataManager.updateStaticMemberThenRebalanceOrCompleteJoin outside Stable) nor
        // when a rebalance of a non-empty group completes (completeClassicGroupJoin), and
        // ClassicGroup.validateMember then fences the live member. That answer is the broker's;
        // the member must not stop on it (checked when it stops: `check_fatal_fence`).
        let moved = self
            .coordinator_moved_at
            .is_some_and(|t| t >= me.started_at);
        if !legit && moved {
            self.excused_fences.insert(p);
            let name = me.name.clone();
            self.log(|| format!("   (FENCED_INSTANCE_ID to {name} after a coordinator move: an older registration loaded)"));
        } else if !legit {
            let msg = format!(
                "{:?}: FENCED_INSTANCE_ID reached {} although no other process holds instance id {instance:?} (self-fencing)",
                self.elapsed(),
                me.name
            );
            self.log(|| format!("!! VIOLATION {msg}"));
            self.violations.push(msg);
        }
    }

    /// Whether a process other than `p` holds `instance` (alive, or its request was processed
    /// after `p` started).
    fn instance_held_elsewhere(&self, p: usize, instance: &str) -> bool {
        let me = &self.procs[p];
        self.procs.iter().enumerate().any(|(i, q)| {
            i != p
                && q.instance_id.as_deref() == Some(instance)
                && (q.member.is_some() || q.last_processed_at.is_some_and(|t| t >= me.started_at))
        })
    }

    /// Whether the coordinator reverted a registration of the process after answering it (a
    /// hazard of the broker's revert, [`World::hazards`]). Any member id the process was
    /// answered with counts, not only the current one: the fence is checked after the member
    /// handled it, and a member that rejoins at once with `""` no longer holds the reverted id.
    fn registration_reverted(&self, p: usize) -> bool {
        let me = &self.procs[p];
        let Some(instance) = me.instance_id.clone() else {
            return false;
        };
        me.member_ids.keys().any(|id| {
            self.reverted_registrations
                .contains(&(instance.clone(), id.clone()))
        })
    }

    /// A member stopped on FENCED_INSTANCE_ID: after a fence excused by a coordinator move
    /// (`check_fence`), that is a self-fence through failover unless another process holds the
    /// instance id by now.
    pub(super) fn check_fatal_fence(&mut self, p: usize) {
        if !self.excused_fences.contains(&p) {
            return;
        }
        let Some(instance) = self.procs[p].instance_id.clone() else {
            return;
        };
        if !self.instance_held_elsewhere(p, &instance) && !self.registration_reverted(p) {
            let msg = format!(
                "{:?}: FENCED_INSTANCE_ID from a coordinator that took over stopped {} although no other process holds instance id {instance:?} (self-fencing through failover)",
                self.elapsed(),
                self.procs[p].name
            );
            self.log(|| format!("!! VIOLATION {msg}"));
            self.violations.push(msg);
        }
    }

    /// Checks the invariants that hold after every step (see [`World::violations`]), after the
    /// steps that can break them: a member changes only when it gets an input (an answer, a
    /// timer, a command), the coordinator only when it processes something.
    ///
    /// The ownership invariants are kept incrementally: an index of who owns what is updated
    /// for the processes whose member changed (or whose KIP-848 member the coordinator changed)
    /// and only their partitions are checked, so a step costs what it changed, not the number of
    /// members. A breach is reported at the step that causes it, as a full check after every
    /// step would; one that persists is not reported again at every later step.
    pub(super) fn observe(&mut self, action: Action) {
        let coordinator_changed = matches!(
            action,
            Action::Coordinator | Action::CoordinatorTimer | Action::Script
        );
        let procs = self.touched.take(self.procs.len());
        let mut changed_procs = Vec::new();
        for i in procs {
            let snapshot = self.procs[i].member.as_deref().map(|m| Snapshot {
                protocol: m.protocol(),
                member_id: m.member_id(),
                generation: m.generation(),
                state: m.state(),
                owned: m.assignment(),
                revoking: self.procs[i].revoking.values().flatten().cloned().collect(),
                streams: m.streams().map(|s| StreamsSnapshot {
                    process_id: s.process().process_id(),
                    guarded: s.process().is_guarded(),
                    tasks: s.tasks().clone(),
                }),
            });
            if snapshot == self.procs[i].snapshot {
                continue;
            }
            changed_procs.push(i);
            let old = std::mem::replace(&mut self.procs[i].snapshot, snapshot);
            let new_id = self.procs[i].snapshot.as_ref().map(|s| &s.member_id);
            if old.as_ref().map(|s| &s.member_id) != new_id {
                if let Some(old) = old
                    && let Some(ps) = self.by_member_id.get_mut(&old.member_id)
                {
                    ps.retain(|p| *p != i);
                    if ps.is_empty() {
                        self.by_member_id.remove(&old.member_id);
                    }
                }
                if let Some(id) = new_id.cloned() {
                    self.by_member_id.entry(id).or_default().push(i);
                }
            }
            match self.procs[i]
                .snapshot
                .as_ref()
                .map(|s| (s.protocol, s.streams.is_some()))
            {
                // Streams members: the streams invariants below.
                Some((_, true)) | None => {}
                Some((GroupProtocol::Consumer, _)) => self.observe_epoch(i),
                Some(_) => self.observe_generation(i),
            }
        }
        if !self.streams_processes.is_empty() && (coordinator_changed || !changed_procs.is_empty())
        {
            self.observe_streams();
        }
        // KIP-848 members the coordinator changed, and processes whose released partitions
        // changed (`note_stale_ack`), are re-read too.
        let members_changed = self.coordinator.take_changed_consumer_members();
        let mut recheck = std::mem::take(&mut self.recheck);
        recheck.extend(changed_procs.iter().copied());
        for id in &members_changed {
            if let Some(ps) = self.by_member_id.get(id) {
                recheck.extend(ps.iter().copied());
            }
        }
        if !coordinator_changed && changed_procs.is_empty() && recheck.is_empty() {
            return;
        }
        self.observe_classic_ownership(&changed_procs);
        let group = self.coordinator.consumer_epochs().is_some();
        if group && !self.consumer_group_seen {
            // A KIP-848 group (again): every process is re-read.
            recheck.extend(0..self.procs.len());
        }
        self.consumer_group_seen = group;
        self.observe_consumer_ownership(&recheck, group, coordinator_changed, &members_changed);
    }

    /// Classic: a member's generation never goes backwards while its member id is unchanged
    /// (a new member id starts over).
    fn observe_generation(&mut self, i: usize) {
        let Some(m) = self.procs[i].snapshot.as_ref() else {
            return;
        };
        let (id, generation) = (m.member_id.clone(), m.generation);
        if id.is_empty() || generation < 0 || self.procs[i].moved_ids.contains(&id) {
            // A member id held across a coordinator move may see an earlier generation again.
            return;
        }
        let prev = self.procs[i].generations.get(&id).copied();
        if let Some(prev) = prev
            && generation < prev
        {
            let msg = format!(
                "{:?}: {} went from generation {prev} back to {generation} with member id {id}",
                self.elapsed(),
                self.procs[i].name
            );
            self.violations.push(msg);
        }
        if prev.is_none_or(|p| generation > p) {
            self.procs[i].generations.insert(id, generation);
        }
    }

    /// KIP-848: the member epoch never decreases, except to 0 when the member (re)joins or
    /// leaves. KIP-1082 keeps the member id through fencing, UNKNOWN_MEMBER_ID and leaves, and
    /// the epoch the member gets back afterwards (the same member reused, KAFKA-19233; a static
    /// replacement; or a new member) is never below one it held: the broker's member epochs
    /// never exceed the group epoch, which only grows.
    fn observe_epoch(&mut self, i: usize) {
        let Some(m) = self.procs[i].snapshot.as_ref() else {
            return;
        };
        let epoch = m.generation;
        let max = self.procs[i].max_epoch;
        if epoch > 0 && epoch < max {
            let msg = format!(
                "{:?}: {} went from member epoch {max} back to {epoch} with member id {} (only a drop to 0, on a rejoin, is allowed)",
                self.elapsed(),
                self.procs[i].name,
                m.member_id
            );
            if !self.violations.contains(&msg) {
                self.violations.push(msg);
            }
        }
        if epoch > max {
            self.procs[i].max_epoch = epoch;
        }
    }

    /// Classic: no partition owned by two live members of the same generation (of the same
    /// coordinator incarnation: a coordinator that took over hands out generation numbers again,
    /// so a member that missed the move may still own partitions under a number the new one
    /// reuses, as a zombie does under an older generation). `changed`: the processes whose
    /// snapshot changed (the only ones whose claims can have).
    fn observe_classic_ownership(&mut self, changed: &[usize]) {
        for &i in changed {
            let next: Vec<(TopicPartition, (u32, i32))> = match self.procs[i].snapshot.as_ref() {
                Some(m) if m.protocol != GroupProtocol::Consumer => {
                    let incarnation = self.procs[i]
                        .gen_incarnation
                        .get(&m.generation)
                        .copied()
                        .unwrap_or_default();
                    m.owned
                        .iter()
                        .map(|tp| (tp.clone(), (incarnation, m.generation)))
                        .collect()
                }
                _ => Vec::new(),
            };
            if next == self.procs[i].classic_claimed {
                continue;
            }
            let old = std::mem::replace(&mut self.procs[i].classic_claimed, next.clone());
            move_claims(&mut self.classic_claims, old, next, i);
        }
        let mut found = Vec::new();
        for &i in changed {
            for key in &self.procs[i].classic_claimed {
                let owners = &self.classic_claims[key];
                for pair in owners.windows(2) {
                    found.push(format!(
                        "{:?}: {} owned by {} and {} in generation {}",
                        self.elapsed(),
                        key.0,
                        self.procs[pair[0]].name,
                        self.procs[pair[1]].name,
                        key.1.1
                    ));
                }
            }
        }
        for f in found {
            if !self.violations.contains(&f) {
                self.violations.push(f);
            }
        }
    }

    /// What process `i` is registered as owning in the KIP-848 ownership index: its assignment
    /// and the partitions of the revocation tickets its application holds, less those the
    /// coordinator released on a stale heartbeat; nothing for a zombie (a member the
    /// coordinator removed, by a rebalance timeout or a static replacement, that still believes
    /// it is in the group, until its next heartbeat answers UNKNOWN_MEMBER_ID), a dead process
    /// or a classic member. A member removed by a session expiry is no zombie: its membership
    /// lease ran out, and it reported its partitions lost, before the session did.
    fn consumer_claims(&self, i: usize) -> Vec<TopicPartition> {
        let p = &self.procs[i];
        let Some(m) = p.snapshot.as_ref() else {
            return Vec::new();
        };
        if m.protocol != GroupProtocol::Consumer || m.streams.is_some() {
            return Vec::new();
        }
        let held = self
            .coordinator
            .consumer_member_holds(&m.member_id, "", -1)
            .is_some();
        let in_group = matches!(
            m.state,
            MemberState::Joining
                | MemberState::Reconciling
                | MemberState::AwaitRevoke
                | MemberState::Acknowledging
                | MemberState::Stable
        );
        // A member whose session expired gets no excuse: its lease (on the group's session
        // timeout) ran out, and it reported its partitions lost, before the coordinator could
        // expire it. Unless its process is starved of CPU ([`World::starve`]): it does nothing
        // until it runs again, and then reports the loss first.
        let expired = self.coordinator.consumer_expired_by_session(&m.member_id);
        if !held && in_group && (!expired || p.frozen_until.is_some()) {
            return Vec::new();
        }
        let owned: BTreeSet<&TopicPartition> = m
            .owned
            .iter()
            .chain(&m.revoking)
            .filter(|tp| !p.stale_acked.contains(*tp))
            .collect();
        owned.into_iter().cloned().collect()
    }

    /// KIP-848: ownership moves only through a revocation the old owner acknowledged, so at
    /// every instant
    /// - no partition is owned by two live members, except by a zombie (see
    ///   [`Self::consumer_claims`]; like a classic member after its session expired);
    /// - a member the coordinator holds owns only partitions the coordinator assigned to it or
    ///   still waits for it to revoke;
    /// - the coordinator's own state is consistent ([`SimCoordinator::check_invariants`]).
    ///
    /// What a member owns is what the application holds: its assignment plus the partitions of
    /// revocation tickets the application has not handed back yet (it is still committing and
    /// processing them), until the member declares them lost ([`Event::Lost`], a fatal error)
    /// or the process dies, or it closes the member (a close takes the tickets back: the
    /// application stopped before it closed). An [`Event::Revoked`] of an unsubscribe does not
    /// end a pending revocation: that leave waits for the application.
    ///
    /// `recheck`: the processes whose claims may have changed (their member, its state at the
    /// coordinator, or its released partitions); `group`: whether the coordinator has a
    /// KIP-848 group (nothing is reported without one); `members_changed`: the KIP-848 members
    /// the coordinator changed since the last observation.
    fn observe_consumer_ownership(
        &mut self,
        recheck: &BTreeSet<usize>,
        group: bool,
        coordinator_changed: bool,
        members_changed: &BTreeSet<String>,
    ) {
        for &i in recheck {
            let next = self.consumer_claims(i);
            if next == self.procs[i].claimed {
                continue;
            }
            let old = std::mem::replace(&mut self.procs[i].claimed, next.clone());
            move_claims(&mut self.claims, old, next, i);
        }
        if !group {
            return;
        }
        let mut found = Vec::new();
        for &i in recheck {
            let p = &self.procs[i];
            let Some(m) = p.snapshot.as_ref() else {
                continue;
            };
            let id = &m.member_id;
            for tp in &p.claimed {
                if self
                    .coordinator
                    .consumer_member_holds(id, &tp.topic, tp.partition)
                    == Some(false)
                {
                    found.push(format!(
                        "{:?}: {} (member {id}) owns {tp}, which the coordinator neither assigned to it nor awaits its revocation of",
                        self.elapsed(),
                        p.name
                    ));
                }
                for pair in self.claims[tp].windows(2) {
                    found.push(format!(
                        "{:?}: {tp} owned by {} and {} at the same time (both members of the group)",
                        self.elapsed(),
                        self.procs[pair[0]].name,
                        self.procs[pair[1]].name
                    ));
                }
            }
        }
        if coordinator_changed || !members_changed.is_empty() {
            found.extend(self.coordinator.check_invariants_of(members_changed));
        }
        let stale: Vec<usize> = self.stale_procs.iter().copied().collect();
        for i in stale {
            let p = &mut self.procs[i];
            let owned = p.snapshot.as_ref().map(|m| (&m.owned, &m.revoking));
            p.stale_acked
                .retain(|tp| owned.is_some_and(|(o, r)| o.contains(tp) || r.contains(tp)));
            if p.stale_acked.is_empty() {
                self.stale_procs.remove(&i);
            }
        }
        for f in found {
            if !self.violations.contains(&f) {
                self.log(|| format!("!! VIOLATION {f}"));
                self.violations.push(f);
            }
        }
    }
}

impl World {
    /// The streams invariants (KIP-1071), over the live streams members' held tasks (what
    /// their applications were handed, not the coordinator's view):
    /// - (a) no task is held by two members of one process whose task guard is on, in any
    ///   roles, at any instant; for a process without the guard such an instant is recorded
    ///   ([`World::process_doubles`]: the coordinator's double ownership, KAFKA-21401);
    /// - (b) no active task is held by two live members at once, except by a zombie: a member
    ///   whose member id the coordinator no longer holds (fenced by a session or rebalance
    ///   timeout, `streamsGroupFenceMember`, or its instance id taken over by a new member id,
    ///   `replaceStreamsMember`; not a session expiry: the member's membership lease ran out
    ///   before it) while the member itself is still in the group (joining,
    ///   reconciling, revoking, acknowledging or stable): it holds its tasks until its next
    ///   answer (UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH) makes it lose them, as a KIP-848
    ///   zombie does. A member the coordinator holds gets no excuse, in any epoch;
    /// - (c) the refiner never derives a warm-up task on a process where its intermediate
    ///   assignment has the task active
    ///   ([`StreamsGroups::refiner_faults`](crate::sim::coordinator::streams::StreamsGroups::refiner_faults)).
    ///   (The coordinator's record may still pair them: a static member replaced from another
    ///   process carries its active tasks there, past the reconciliation's checks, as in
    ///   KAFKA-21401; the task guard (a) covers what the applications hold.)
    fn observe_streams(&mut self) {
        let group = self.coordinator.config().group_id.clone();
        let streams = self.coordinator.streams();
        let mut found = Vec::new();
        let mut doubles = Vec::new();
        // Holders per (process, task), and active holders per task, in process order.
        let mut by_process: BTreeMap<(&str, &TaskId), Vec<(usize, TaskRole)>> = BTreeMap::new();
        let mut active: BTreeMap<&TaskId, Vec<usize>> = BTreeMap::new();
        let mut guarded: BTreeMap<&str, bool> = BTreeMap::new();
        for (i, p) in self.procs.iter().enumerate() {
            let Some((m, st)) = p
                .snapshot
                .as_ref()
                .and_then(|m| m.streams.as_ref().map(|st| (m, st)))
            else {
                continue;
            };
            guarded.insert(&st.process_id, st.guarded);
            for (t, role) in st.tasks.iter() {
                by_process
                    .entry((&st.process_id, t))
                    .or_default()
                    .push((i, role));
            }
            let in_group = matches!(
                m.state,
                MemberState::Joining
                    | MemberState::Reconciling
                    | MemberState::AwaitRevoke
                    | MemberState::Acknowledging
                    | MemberState::Stable
            );
            // No excuse after a session expiry: the member's lease ran out first.
            // (A starved process, [`World::starve`], reports it first when it runs again.)
            let zombie = in_group
                && !streams.has_member(&group, &m.member_id)
                && (!streams.expired_by_session(&group, &m.member_id) || p.frozen_until.is_some());
            if !zombie {
                for t in &st.tasks.active {
                    active.entry(t).or_default().push(i);
                }
            }
        }
        let name = |i: usize| &self.procs[i].name;
        for ((process, task), holders) in &by_process {
            if holders.len() < 2 {
                continue;
            }
            let who: Vec<String> = holders
                .iter()
                .map(|(i, r)| format!("{} ({r})", name(*i)))
                .collect();
            let what = format!(
                "task {task} held by {} of process {process}",
                who.join(" and ")
            );
            if guarded.get(process).copied().unwrap_or(true) {
                found.push(format!(
                    "{:?}: {what} at the same time, its task guard on",
                    self.elapsed()
                ));
            } else {
                doubles.push(what);
            }
        }
        // (c) The refiner never derives a warm-up task on a process where the intermediate
        // assignment has the task active.
        for f in streams.refiner_faults() {
            found.push(format!("{:?}: refiner: {f}", self.elapsed()));
        }
        for (task, holders) in &active {
            if holders.len() > 1 {
                let who: Vec<&String> = holders.iter().map(|i| name(*i)).collect();
                found.push(format!(
                    "{:?}: active task {task} held by {who:?} at the same time (members of the group)",
                    self.elapsed()
                ));
            }
        }
        for d in doubles {
            if !self.process_doubles.iter().any(|x| x.ends_with(&d)) {
                let line = format!("{:?}: {d}", self.elapsed());
                self.log(|| format!("!! DOUBLE OWNERSHIP (unguarded) {line}"));
                self.process_doubles.push(line);
            }
        }
        for f in found {
            let key = f.split_once(": ").map_or(f.as_str(), |x| x.1).to_owned();
            if !self.violations.iter().any(|v| v.ends_with(&key)) {
                self.log(|| format!("!! VIOLATION {f}"));
                self.violations.push(f);
            }
        }
    }
}

/// Moves `owner`'s claims in `index` from `old` to `next`.
fn move_claims<K: Ord>(
    index: &mut BTreeMap<K, Vec<usize>>,
    old: Vec<K>,
    next: Vec<K>,
    owner: usize,
) {
    for key in old {
        unclaim(index, &key, owner);
    }
    for key in next {
        claim(index, key, owner);
    }
}

/// Adds `owner` to the owners of `key` (kept in process order; a process may appear twice).
fn claim<K: Ord>(index: &mut BTreeMap<K, Vec<usize>>, key: K, owner: usize) {
    let owners = index.entry(key).or_default();
    let at = owners.partition_point(|o| *o <= owner);
    owners.insert(at, owner);
}

/// Removes one `owner` from the owners of `key`.
fn unclaim<K: Ord>(index: &mut BTreeMap<K, Vec<usize>>, key: &K, owner: usize) {
    if let Some(owners) = index.get_mut(key) {
        if let Some(at) = owners.iter().position(|o| *o == owner) {
            owners.remove(at);
        }
        if owners.is_empty() {
            index.remove(key);
        }
    }
}
