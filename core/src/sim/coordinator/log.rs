//! The group's `__consumer_offsets` partition as the coordinator runtime drives it
//! (coordinator-common `CoordinatorRuntime`, group-coordinator `GroupMetadataManager`):
//! - every group operation is a write event: its records are appended, and the operation
//!   completes once they are committed (replicated); an operation without records completes once
//!   every earlier write committed (`CoordinatorRuntime.waitForPendingWrites` /
//!   `deferredEventQueue`). Heartbeat, LeaveGroup, ConsumerGroupHeartbeat and OffsetCommit answers
//!   wait so; JoinGroup and SyncGroup answers are completed by the group code itself (their
//!   `responseFuture`), some from an `appendFuture` callback;
//! - an append can fail at once (`CoordinatorRuntime`'s append throws; the timeline state is
//!   reverted, `revertLastWrittenOffset`, and the `appendFuture` completes exceptionally) or
//!   commit late: an operation not done within the write timeout (`offsets.commit.timeout.ms`)
//!   fails with REQUEST_TIMED_OUT, answered COORDINATOR_NOT_AVAILABLE
//!   (`CoordinatorOperationExceptionHelper.handleOperationException`), while its records stay in
//!   the log and still commit (`OperationTimeout`);
//! - unload (`CoordinatorRuntime.unload`): timers cancelled, every pending write failed with
//!   NOT_COORDINATOR (`deferredEventQueue.failAll`), then `GroupMetadataManager.onUnloaded`
//!   (classic groups turn Dead; parked JoinGroups, or SyncGroups, answered NOT_COORDINATOR).
//!   Until another broker leads the partition, FindCoordinator answers COORDINATOR_NOT_AVAILABLE
//!   (`KafkaApis.getCoordinator`) and group requests NOT_COORDINATOR (`contextOrThrow`);
//! - load on the new leader: while it replays the log, group requests get
//!   COORDINATOR_LOAD_IN_PROGRESS (`withActiveContextOrThrow`); it replays only committed
//!   records (plus those of the old leader's uncommitted writes that had reached it: `survivors`),
//!   then `GroupMetadataManager.onLoaded` schedules the members' session timeouts (and the
//!   rebalance timeouts of KIP-848 members revoking partitions).
//!
//! What a record holds is kept as the state a loading coordinator rebuilds from it: a classic
//! group as `ClassicGroup.fromRecord` loads a `GroupMetadataValue` (written only by
//! `classicGroupJoin` for a new group, `completeClassicGroupJoin` for an empty generation,
//! `updateStaticMemberThenRebalanceOrCompleteJoin` in Stable and the leader's `classicGroupSync`),
//! a KIP-848 group as it stood after the write, the offsets after the commit.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    ConsumerGroupHeartbeatResponse, HeartbeatResponse, LeaveGroupResponse, ResponseKind,
    SyncGroupResponse,
};
use rand::Rng;

use super::classic::ClassicGroup;
use super::consumer::ConsumerGroup;
use super::{Append, Parked, Reply, SimCoordinator, name};
use crate::messages::StreamsGroupHeartbeatResponse;
use crate::request::ResponseBody;
use crate::sim::codes::*;

/// Committed offsets by (topic, partition): offset and metadata.
pub(super) type Offsets = BTreeMap<(String, i32), (i64, Option<String>)>;

/// What a record puts in the state a loading coordinator replays.
#[derive(Debug, Clone)]
pub(super) enum Record {
    /// `GroupMetadataValue`, as `ClassicGroup.fromRecord` loads it.
    Classic(Box<ClassicGroup>),
    /// The KIP-848 group's records of one write (member, target, current assignment and epoch
    /// records): the group as it stood after the write.
    Consumer(Box<ConsumerGroup>),
    /// `OffsetCommitValue` records: the offsets one commit wrote.
    Offsets(Box<Offsets>),
}

/// The state the committed records rebuild.
#[derive(Debug, Clone, Default)]
pub(super) struct Image {
    classic: Option<ClassicGroup>,
    consumer: Option<ConsumerGroup>,
    offsets: Offsets,
}

impl Image {
    /// Replays one record: a group id holds one group, so a record of one type replaces a
    /// group of the other.
    fn apply(&mut self, r: Record) {
        match r {
            Record::Classic(g) => {
                self.classic = Some(*g);
                self.consumer = None;
            }
            Record::Consumer(c) => {
                self.consumer = Some(*c);
                self.classic = None;
            }
            Record::Offsets(o) => self.offsets.extend(*o),
        }
    }
}

/// A write appended to the log and not committed yet.
#[derive(Debug)]
pub(super) struct Write {
    commit_at: Instant,
    /// The operation's `OperationTimeout`.
    timeout_at: Instant,
    records: Vec<Record>,
    /// What the operation completes once its records commit (`appendFuture`); emptied when the
    /// operation times out first.
    pub(super) on_commit: Vec<Append>,
    /// Answers waiting for this write (and so every earlier one) to commit, each with its own
    /// operation's timeout.
    waiters: Vec<(Instant, Reply)>,
}

/// A fault of one append to the group's partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendFault {
    /// The append fails at once, with the error the operation answers: COORDINATOR_NOT_AVAILABLE
    /// (the log refused it with NOT_ENOUGH_REPLICAS) or NOT_COORDINATOR (NOT_LEADER_OR_FOLLOWER,
    /// KAFKA_STORAGE_ERROR), as `handleOperationException` and
    /// `appendGroupMetadataErrorToResponseError` map them.
    Fail(i16),
    /// The append is replicated late: it commits this long after the write timeout, so its
    /// operation times out (COORDINATOR_NOT_AVAILABLE) while its records still commit; later
    /// writes commit behind it.
    Slow(Duration),
}

/// Seeded per-append faults (probabilities per append that carries records).
#[derive(Debug, Clone, Default)]
pub struct AppendFaults {
    /// Probability that an append fails at once (COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR,
    /// half each).
    pub fail: f64,
    /// Probability that an append commits only after the write timeout.
    pub slow: f64,
    /// How long after the write timeout a slow append commits.
    pub slow_extra: Duration,
}

/// Where the group's coordinator stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Residence {
    /// Serving the group.
    Active,
    /// Unloaded; no broker leads the partition yet.
    Unloaded,
    /// The new leader replays the log until `until`.
    Loading {
        /// When the load completes.
        until: Instant,
    },
}

/// What an operation's bookkeeping needs from before it ran.
#[derive(Debug)]
pub(super) struct OpStart {
    /// The KIP-848 group before the operation (to tell whether it wrote records, and to revert
    /// a failed append), when kept.
    consumer: Option<Option<ConsumerGroup>>,
    offsets: Option<Offsets>,
    /// Whether a classic group existed (a group the operation creates is reverted with it).
    classic_existed: bool,
    replies: usize,
    fault: Option<AppendFault>,
}

/// The APIs whose answer is the write operation's own result (it waits for the commit);
/// JoinGroup and SyncGroup answers are completed by the group code directly.
fn answer_waits(api: kafka_protocol::messages::ApiKey) -> bool {
    use kafka_protocol::messages::ApiKey;
    matches!(
        api,
        ApiKey::Heartbeat
            | ApiKey::LeaveGroup
            | ApiKey::ConsumerGroupHeartbeat
            | ApiKey::OffsetCommit
    )
}

/// The answer `body` failed with `code` (`handleOperationException`'s error answers).
pub(super) fn error_like(body: &ResponseBody, code: i16) -> ResponseBody {
    let body = match body {
        ResponseBody::Kafka(body) => body,
        ResponseBody::StreamsGroupHeartbeat(_) => {
            return ResponseBody::StreamsGroupHeartbeat(
                StreamsGroupHeartbeatResponse::default().with_error_code(code),
            );
        }
        other => return other.clone(),
    };
    ResponseBody::Kafka(match body {
        ResponseKind::Heartbeat(_) => {
            ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(code))
        }
        ResponseKind::LeaveGroup(_) => {
            ResponseKind::LeaveGroup(LeaveGroupResponse::default().with_error_code(code))
        }
        ResponseKind::ConsumerGroupHeartbeat(_) => ResponseKind::ConsumerGroupHeartbeat(
            ConsumerGroupHeartbeatResponse::default().with_error_code(code),
        ),
        ResponseKind::SyncGroup(_) => {
            ResponseKind::SyncGroup(SyncGroupResponse::default().with_error_code(code))
        }
        ResponseKind::OffsetCommit(r) => {
            let mut r = r.clone();
            for t in &mut r.topics {
                for p in &mut t.partitions {
                    p.error_code = code;
                }
            }
            ResponseKind::OffsetCommit(r)
        }
        other => other.clone(),
    })
}

impl SimCoordinator {
    /// Where the group's coordinator stands.
    pub fn residence(&self) -> Residence {
        self.residence
    }

    /// The node leading the group's partition (the one FindCoordinator names).
    pub fn node_id(&self) -> i32 {
        self.config.node_id
    }

    /// Writes appended and not committed yet.
    pub fn pending_writes(&self) -> usize {
        self.log.len()
    }

    /// The next append that carries records meets `fault` (scripted faults come before the
    /// seeded ones of [`CoordinatorConfig::append_faults`](super::CoordinatorConfig)).
    pub fn fault_next_append(&mut self, fault: AppendFault) {
        self.forced_faults.push_back(fault);
    }

    /// Replaces the seeded append faults and drops the scripted ones not met yet (e.g. to stop
    /// them).
    pub fn set_append_faults(&mut self, faults: AppendFaults) {
        self.config.append_faults = faults;
        self.forced_faults.clear();
    }

    /// How many appends failed so far ([`AppendFault::Fail`]).
    pub fn failed_appends(&self) -> u64 {
        self.failed_appends
    }

    /// Records the current operation writes (classic group metadata).
    pub(super) fn write_record(&mut self, r: Record) {
        self.op_records.push(r);
    }

    /// Before an operation: what its bookkeeping needs (`faults`: whether its append may meet a
    /// fault; timer operations do not).
    pub(super) fn begin_op(&mut self, faults: bool) -> OpStart {
        let fault = if !faults {
            None
        } else if let Some(f) = self.forced_faults.front() {
            Some(*f)
        } else {
            let cfg = &self.config.append_faults;
            if cfg.fail > 0.0 && self.fault_rng.random_bool(cfg.fail) {
                let code = if self.fault_rng.random_bool(0.5) {
                    COORDINATOR_NOT_AVAILABLE
                } else {
                    NOT_COORDINATOR
                };
                Some(AppendFault::Fail(code))
            } else if cfg.slow > 0.0 && self.fault_rng.random_bool(cfg.slow) {
                Some(AppendFault::Slow(cfg.slow_extra))
            } else {
                None
            }
        };
        let failing = matches!(fault, Some(AppendFault::Fail(_)));
        OpStart {
            consumer: (self.config.keep_log || failing).then(|| self.consumer.clone()),
            offsets: failing.then(|| self.offsets.clone()),
            classic_existed: self.classic.is_some(),
            replies: self.replies.len(),
            fault,
        }
    }

    /// After an operation: its records go to the log (or its append fails), and its own answer
    /// (`own`, for the APIs whose answer is the write's result) waits for the commit.
    pub(super) fn end_op(
        &mut self,
        op: OpStart,
        own: Option<(Parked, kafka_protocol::messages::ApiKey)>,
    ) {
        let mut records = std::mem::take(&mut self.op_records);
        let mut on_commit = Vec::new();
        for (_, a) in std::mem::take(&mut self.appends) {
            on_commit.push(a);
        }
        if let Some(Some(before)) = &op.consumer
            && let Some(after) = &self.consumer
            && !before.same_records(after)
        {
            records.push(Record::Consumer(Box::new(after.clone())));
        } else if let Some(None) = &op.consumer
            && let Some(after) = &self.consumer
        {
            records.push(Record::Consumer(Box::new(after.clone())));
        }
        // The operation's own answer, if it waits for a commit.
        let mut mine = Vec::new();
        if let Some((p, api)) = own
            && answer_waits(api)
        {
            let mut i = op.replies;
            while i < self.replies.len() {
                let r = &self.replies[i];
                if r.conn == p.conn && r.correlation == p.correlation {
                    mine.push(self.replies.remove(i).expect("in range"));
                } else {
                    i += 1;
                }
            }
        }
        let wrote = !records.is_empty() || !on_commit.is_empty();
        let deadline = self.now + self.config.write_timeout;
        if !wrote {
            // waitForPendingWrites: complete once every earlier write committed.
            match self.log.back_mut() {
                Some(w) => w.waiters.extend(mine.into_iter().map(|r| (deadline, r))),
                None => self.replies.extend(mine),
            }
            return;
        }
        if op.fault.is_some() {
            self.forced_faults.pop_front();
        }
        if let Some(AppendFault::Fail(code)) = op.fault {
            self.failed_appends += 1;
            // The append throws: the timeline state goes back to before the operation
            // (revertLastWrittenOffset) and the appendFuture completes exceptionally.
            self.note(|| format!("append fails: the operation is reverted, {}", name(code)));
            if let Some(before) = op.consumer {
                self.consumer = before.map(|b| b.restored(self.consumer.as_ref()));
                // The timers the operation cancelled stay cancelled.
                let ghosts: Vec<String> = self
                    .consumer
                    .iter()
                    .flat_map(|c| c.members.keys())
                    .filter(|id| !self.consumer_sessions.by_id.contains_key(*id))
                    .cloned()
                    .collect();
                for id in ghosts {
                    self.hazards.push(format!(
                        "KIP-848 member {id} restored by a failed append without its session timeout (consumerGroupFenceMembers' cancelTimers is not reverted): it stays until the group's partition loads again"
                    ));
                }
            }
            if let Some(before) = op.offsets {
                self.offsets = before;
            }
            if !op.classic_existed {
                // classicGroupJoin: the new group's empty record failed; the group is removed
                // and the JoinGroup answered with the error.
                self.classic_creation_failed(code);
            }
            for a in on_commit {
                self.append_failed(a, code);
            }
            for r in mine {
                let body = error_like(&r.body, code);
                self.replies.push_back(Reply { body, ..r });
            }
            return;
        }
        let mut commit_at = self.now + self.config.append_latency;
        if let Some(AppendFault::Slow(extra)) = op.fault {
            commit_at = deadline + extra;
            let after = commit_at - self.now;
            self.note(|| format!("append replicated late: commits after {after:?}"));
        }
        // Writes commit in log order (the high watermark).
        if let Some(last) = self.log.back() {
            commit_at = commit_at.max(last.commit_at);
        }
        self.log.push_back(Write {
            commit_at,
            timeout_at: deadline,
            records,
            on_commit,
            waiters: mine.into_iter().map(|r| (deadline, r)).collect(),
        });
    }

    /// The earliest commit or operation timeout in the log, or the end of a load.
    pub(super) fn log_timeout(&self) -> Option<Instant> {
        let mut next = match self.residence {
            Residence::Loading { until } => Some(until),
            _ => None,
        };
        for w in &self.log {
            let mut t = w.commit_at;
            if !w.on_commit.is_empty() {
                t = t.min(w.timeout_at);
            }
            if let Some(d) = w.waiters.iter().map(|(d, _)| *d).min() {
                t = t.min(d);
            }
            next = Some(next.map_or(t, |n: Instant| n.min(t)));
        }
        next
    }

    /// Commits what is due, then times out the operations still waiting past their timeout.
    pub(super) fn advance_log(&mut self, now: Instant) {
        if let Residence::Loading { until } = self.residence
            && until <= now
        {
            self.finish_load();
        }
        while let Some(w) = self.log.front()
            && w.commit_at <= now
        {
            let w = self.log.pop_front().expect("checked");
            for r in w.records {
                if let Record::Offsets(o) = &r {
                    // OffsetMetadataManager.replay: committed offsets are what fetches read.
                    self.offsets
                        .extend(o.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
                self.committed.apply(r);
            }
            for a in w.on_commit {
                self.append_committed(a);
            }
            self.replies.extend(w.waiters.into_iter().map(|(_, r)| r));
        }
        let mut failed = Vec::new();
        let mut late = Vec::new();
        for w in self.log.iter_mut() {
            if w.timeout_at <= now && !w.on_commit.is_empty() {
                failed.append(&mut w.on_commit);
            }
            if w.waiters.iter().any(|(d, _)| *d <= now) {
                let (due, keep): (Vec<_>, Vec<_>) =
                    w.waiters.drain(..).partition(|(d, _)| *d <= now);
                w.waiters = keep;
                late.extend(due.into_iter().map(|(_, r)| r));
            }
        }
        if !failed.is_empty() || !late.is_empty() {
            self.note(|| "write timed out: the operation fails, its records still commit".into());
        }
        // OperationTimeout: REQUEST_TIMED_OUT, answered COORDINATOR_NOT_AVAILABLE.
        for a in failed {
            self.append_failed(a, COORDINATOR_NOT_AVAILABLE);
        }
        for r in late {
            let body = error_like(&r.body, COORDINATOR_NOT_AVAILABLE);
            self.replies.push_back(Reply { body, ..r });
        }
    }

    /// The `appendFuture` completed exceptionally with `code`.
    fn append_failed(&mut self, a: Append, code: i16) {
        match a {
            Append::Answer(reply) => {
                let body = error_like(&reply.body, code);
                self.replies.push_back(Reply { body, ..*reply });
            }
            Append::Offsets(a) => self.offsets_failed(*a, code),
            Append::SyncAssignment { generation, .. } => {
                self.sync_assignment_failed(generation, code)
            }
            Append::StaticReplacement {
                member_id,
                generation,
                old,
                current_leader,
                ..
            } => self.static_replacement_failed(&member_id, generation, *old, current_leader, code),
        }
    }

    /// The coordinator loses the group's partition (`CoordinatorRuntime.unload`, then
    /// `GroupMetadataManager.onUnloaded`). The first `survivors` pending writes had reached the
    /// next leader's log: it replays them (their operations still fail here).
    pub fn unload(&mut self, survivors: usize) {
        if self.residence == Residence::Unloaded {
            return;
        }
        if !self.config.keep_log {
            // Without the log kept, a load replays the state as it is.
            self.committed.consumer = self.consumer.clone();
            self.committed.offsets = self.offsets.clone();
        }
        let pending = self.log.len();
        self.note(|| {
            format!(
                "unload: timers cancelled, {pending} pending writes fail with NOT_COORDINATOR ({survivors} replicated)"
            )
        });
        // timer.cancelAll, deferredEventQueue.failAll(NOT_COORDINATOR).
        self.cancel_timers();
        let log = std::mem::take(&mut self.log);
        for (i, w) in log.into_iter().enumerate() {
            if i < survivors {
                for r in w.records {
                    self.committed.apply(r);
                }
            }
            for a in w.on_commit {
                self.append_failed(a, NOT_COORDINATOR);
            }
            for (_, r) in w.waiters {
                let body = error_like(&r.body, NOT_COORDINATOR);
                self.replies.push_back(Reply { body, ..r });
            }
        }
        // onUnloaded: classic groups turn Dead; their parked futures answer NOT_COORDINATOR.
        self.classic_unloaded();
        self.cancel_timers();
        self.classic = None;
        self.consumer = None;
        self.op_records.clear();
        self.appends.clear();
        self.residence = Residence::Unloaded;
    }

    /// `node_id` becomes the partition's leader and loads the group, for `load_time`.
    pub fn load(&mut self, node_id: i32, load_time: Duration) {
        self.config.node_id = node_id;
        self.residence = Residence::Loading {
            until: self.now + load_time,
        };
        self.note(|| format!("node {node_id} leads the group's partition: loading"));
    }

    /// The load completed: the committed records replayed, then `onLoaded`.
    fn finish_load(&mut self) {
        let image = self.committed.clone();
        self.classic = image.classic;
        self.consumer = image.consumer.map(|c| c.restored(None));
        self.offsets = image.offsets;
        self.residence = Residence::Active;
        // onLoaded: every member's session timeout (classic and consumer), the rebalance
        // timeout of consumer members revoking partitions.
        let classic: Vec<String> = self
            .classic
            .as_ref()
            .map(|g| g.members.keys().cloned().collect())
            .unwrap_or_default();
        for id in &classic {
            self.reschedule_heartbeat(id, None);
        }
        self.consumer_on_loaded();
        let (generation, members) = (
            self.generation(),
            classic.len() + self.consumer.as_ref().map_or(0, |c| c.members.len()),
        );
        self.note(|| {
            format!(
                "onLoaded: committed records replayed (generation/epoch {generation}, {members} members)"
            )
        });
    }

    fn cancel_timers(&mut self) {
        self.heartbeats = super::Timers::new();
        self.consumer_sessions = super::Timers::new();
        self.consumer_rebalance_timeouts = super::Timers::new();
        self.join_timer = None;
        self.sync_timer = None;
    }
}
