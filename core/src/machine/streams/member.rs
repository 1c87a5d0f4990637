//! The streams member's state machine: the KIP-1071 protocol's own part of an
//! [`EpochMember`]; its rules are the docs of the parent module.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::config::GroupConfig;
use crate::error::{ApiMisuse, ConfigError, GroupError, TransportError, codes};
use crate::machine::TopicPartition;
use crate::machine::epoch::{
    EpochMember, EpochProtocol, Phase, ReadBack, Sent, epoch_answer, invalid, member_id_of,
};
use crate::machine::events::{CloseOptions, CommitId, CommitOffset, FetchId, Reason};
use crate::machine::session;
use crate::machine::shell::{Skeleton, millis};
use crate::machine::timer::Timer;
use crate::member_id::MemberId;
use crate::messages::streams_group_describe_response as desc;
use crate::messages::streams_group_heartbeat_request as req;
use crate::messages::streams_group_heartbeat_response as resp;
use crate::messages::{
    StreamsGroupDescribeRequest, StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse,
    StreamsGroupTopologyDescriptionUpdateRequest,
};
use crate::request::{Api, Broker, Reply, Request, RequestId, Response, ResponseBody};

use super::guard::{Acquire, Intervention, InterventionKind, StreamsProcess};
use super::topology::{
    EndpointPartitions, ROLES, RefusedTasks, StatusCode, StreamsStatus, StreamsTasks,
    StreamsTopology, TaskId, TaskRole, TopologyDescription, UserEndpoint, endpoints_from_wire,
    offsets_to_wire, statuses_from_wire, str_bytes, tasks_from_wire, tasks_to_wire,
};
use super::{DescriptionPushError, ReleaseReason, StreamsEvent};

/// StreamsGroupHeartbeat v0-1: the request is the same at both; v1 answers carry
/// `AcceptableRecoveryLag` (and may carry MISSING_CLIENT_TAGS).
const HEARTBEAT_VERSIONS: std::ops::RangeInclusive<i16> = 0..=1;
/// StreamsGroupTopologyDescriptionUpdate: Kafka 4.4 has v0 only.
const PUSH_VERSIONS: std::ops::RangeInclusive<i16> = 0..=0;
/// The longest a member withholding a task waits before it asks the guard again.
pub const GUARD_RECHECK: Duration = Duration::from_millis(250);

/// What a streams member declares besides the group settings of [`GroupConfig`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamsConfig {
    /// The application's topology.
    pub topology: StreamsTopology,
    /// Client tags for rack-aware standby placement (`client.tag.*`).
    pub client_tags: BTreeMap<String, String>,
    /// The topology's description, pushed at the topology's epoch when the coordinator asks
    /// for it (KIP-1331: a heartbeat answer with `TopologyDescriptionRequired`, from a Kafka 4.4
    /// broker with a topology description plugin); see
    /// [`StreamsEvent::TopologyDescriptionPushed`]. `None` (the default): nothing is ever
    /// pushed, as Kafka Streams with `topology.description.push.enabled=false`.
    pub topology_description: Option<TopologyDescription>,
}

impl StreamsConfig {
    /// A member of an application with `topology`, no client tags and no topology description.
    pub fn new(topology: StreamsTopology) -> Self {
        Self {
            topology,
            client_tags: BTreeMap::new(),
            topology_description: None,
        }
    }

    /// The same configuration pushing `description` when the coordinator asks for it.
    #[must_use]
    pub fn with_topology_description(mut self, description: TopologyDescription) -> Self {
        self.topology_description = Some(description);
        self
    }
}

/// Where the member is with the coordinator's ask for its topology description (KIP-1331;
/// StreamsGroupTopologyDescriptionRequestManager).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Push {
    /// Nothing asked for, or nothing to push.
    #[default]
    Idle,
    /// The coordinator asked: the push goes out with the next `poll_request`.
    Due,
    /// The push `0` is in flight (one at a time).
    InFlight(RequestId),
    /// The last push failed in a way retrying fixes (the coordinator moved or loads, the
    /// connection failed): due again after the next heartbeat answer, which paces the retries.
    Retry,
    /// The broker cannot take a description or refused this one for good: no more pushes at
    /// this topology epoch (the member's, fixed for its life).
    Stopped,
}

/// What the last heartbeats carried of the fields sent only when they change
/// (StreamsGroupHeartbeatRequestManager.HeartbeatState.LastSentFields); `None` in the member
/// makes the next heartbeat full.
#[derive(Debug, Clone, PartialEq, Default)]
struct LastSent {
    owned: Option<StreamsTasks>,
    offsets: Option<BTreeMap<TaskId, i64>>,
    end_offsets: Option<BTreeMap<TaskId, i64>>,
}

/// The KIP-1071 streams protocol's part of a [`StreamsMember`]: its topology and process, the
/// tasks it holds by role, the guard's view, and what it reports besides its tasks.
#[derive(Debug)]
pub struct StreamsProtocol {
    /// The member's id, for the guard when the member goes away.
    member_id: MemberId,
    streams: StreamsConfig,
    process: StreamsProcess,
    /// `join` was called and no leave since: a poll after a poll timeout rejoins.
    subscribed: bool,
    /// Tasks handed to the application (revoking ones included until the ticket comes back).
    owned: StreamsTasks,
    /// The latest target from the coordinator (one role per task).
    target: Option<StreamsTasks>,
    /// Tasks of the target the guard withholds, with their role.
    withheld: BTreeMap<TaskId, TaskRole>,
    /// Tasks of the latest assignment of subtopologies the topology lacks: never taken.
    refused: RefusedTasks,
    last_sent: Option<LastSent>,
    /// The owned tasks as of the last answered heartbeat that listed them.
    acked_owned: Option<StreamsTasks>,
    task_offsets: BTreeMap<TaskId, i64>,
    task_end_offsets: BTreeMap<TaskId, i64>,
    task_offset_interval: Duration,
    acceptable_recovery_lag: i64,
    offsets_sent_at: Option<Instant>,
    shutdown_requested: bool,
    endpoint_epoch: i32,
    endpoints: BTreeMap<UserEndpoint, EndpointPartitions>,
    statuses: Vec<StreamsStatus>,
    /// The topology description push.
    push: Push,
    events: std::collections::VecDeque<StreamsEvent>,
}

impl Drop for StreamsProtocol {
    fn drop(&mut self) {
        // A member that goes away holds nothing the other members of its process must wait for.
        self.process.forget(self.member_id.as_str());
    }
}

/// A KIP-1071 streams-group member (sans-IO); its state diagram, identity rules and the task
/// guard's rules are the docs of [`machine::streams`](crate::machine::streams), what it shares
/// with the other epoch-heartbeat members those of [`machine::epoch`](crate::machine::epoch).
pub type StreamsMember = EpochMember<StreamsProtocol>;

// The member id is empty when the coordinator names no member.
epoch_answer!(
    StreamsGroupHeartbeatResponse,
    Api::STREAMS_GROUP_HEARTBEAT,
    r in ResponseBody::StreamsGroupHeartbeat(r),
    |r| (!r.member_id.is_empty()).then_some(r.member_id.as_str())
);

/// StreamsGroupHeartbeat `r`, as the member sends it.
fn heartbeat_request(r: StreamsGroupHeartbeatRequest) -> Request {
    Request::StreamsGroupHeartbeat {
        body: Box::new(r),
        versions: HEARTBEAT_VERSIONS,
    }
}

impl EpochProtocol for StreamsProtocol {
    const SESSION: session::Keys = session::STREAMS;
    /// The owned tasks the heartbeat listed, if it listed them.
    type Heartbeat = Option<StreamsTasks>;
    /// The active tasks being revoked.
    type Revoking = BTreeSet<TaskId>;
    type Answer = StreamsGroupHeartbeatResponse;

    fn validate(&self, _config: &GroupConfig) -> Result<(), ConfigError> {
        self.streams.topology.validate()?;
        match &self.streams.topology_description {
            Some(d) => d.validate(),
            None => Ok(()),
        }
    }

    fn decode(response: Response) -> Option<Self::Answer> {
        match response.body {
            ResponseBody::StreamsGroupHeartbeat(mut r) => {
                if response.version < 1 {
                    // v0 carries the lag in the legacy int32 field only.
                    r.acceptable_recovery_lag = i64::from(r.acceptable_recovery_lag_legacy);
                }
                Some(r)
            }
            _ => None,
        }
    }

    fn unsupported() -> GroupError {
        GroupError::StreamsProtocolUnsupported
    }

    /// The streams protocol's own terminal codes (StreamsGroupHeartbeatRequestManager
    /// .onErrorResponse), and UNSUPPORTED_VERSION: the broker does not speak it.
    fn own_error(m: &StreamsMember, r: &StreamsGroupHeartbeatResponse) -> Option<GroupError> {
        let group = m.shell.config.group_id.clone();
        let message = r.error_message.as_ref().map(|m| m.to_string());
        match r.error_code {
            codes::STREAMS_INVALID_TOPOLOGY => {
                Some(GroupError::StreamsInvalidTopology { group, message })
            }
            codes::STREAMS_INVALID_TOPOLOGY_EPOCH => {
                Some(GroupError::StreamsInvalidTopologyEpoch { group, message })
            }
            codes::STREAMS_TOPOLOGY_FENCED => {
                Some(GroupError::StreamsTopologyFenced { group, message })
            }
            codes::UNSUPPORTED_VERSION => Some(GroupError::StreamsProtocolUnsupported),
            _ => None,
        }
    }

    fn heartbeat(m: &mut StreamsMember) -> (Request, Self::Heartbeat) {
        m.heartbeat_request()
    }

    /// The coordinator sends a member its tasks only when it joins or when its own heartbeat
    /// changed them (GroupMetadataManager.streamsGroupHeartbeat: `isJoining ||
    /// assignedTaskChanged`; no full-request echo as for consumer groups), and a rejoin at
    /// epoch 0 is refused to a static member whose instance id it holds
    /// (UNRELEASED_INSTANCE_ID). StreamsGroupDescribe returns the member's current assignment
    /// and epoch (StreamsGroupMember.asStreamsGroupDescribeMember: `assignedTasks`, the tasks
    /// the last processed heartbeat's answer carried), whatever the member is: the read back.
    fn read_back(m: &StreamsMember) -> Option<Request> {
        let group = kafka_protocol::messages::GroupId(m.shell.config.group_id.clone().into());
        let body = StreamsGroupDescribeRequest::default().with_group_ids(vec![group]);
        Some(Request::StreamsGroupDescribe {
            body: Box::new(body),
            versions: 0..=1,
        })
    }

    fn read_back_answer(
        m: &StreamsMember,
        response: Response,
    ) -> ReadBack<StreamsGroupHeartbeatResponse, Option<StreamsTasks>> {
        let ResponseBody::StreamsGroupDescribe(r) = response.body else {
            return ReadBack::Done;
        };
        let group = m.shell.config.group_id.as_str();
        let Some(g) = r.groups.iter().find(|g| g.group_id.0.as_str() == group) else {
            return ReadBack::Done;
        };
        match g.error_code {
            codes::NONE => {}
            codes::NOT_COORDINATOR
            | codes::COORDINATOR_NOT_AVAILABLE
            | codes::COORDINATOR_LOAD_IN_PROGRESS => return ReadBack::Retry,
            code => {
                // GROUP_ID_NOT_FOUND, GROUP_AUTHORIZATION_FAILED, ...: the next heartbeat says
                // what the member needs to know.
                tracing::info!(group, code, "the member's record could not be read back");
                return ReadBack::Done;
            }
        }
        let id = m.member_id.as_str();
        let Some(me) = g.members.iter().find(|d| d.member_id.as_str() == id) else {
            return ReadBack::Done;
        };
        // Epochs only grow; a record below the member's own (or of a static member's
        // temporary leave, -2) is no answer to the member's heartbeat.
        if me.member_epoch < m.epoch {
            return ReadBack::Done;
        }
        let tasks = |list: &[desc::TaskIds]| {
            list.iter()
                .map(|t| {
                    resp::TaskIds::default()
                        .with_subtopology_id(t.subtopology_id.clone())
                        .with_partitions(t.partitions.clone())
                })
                .collect::<Vec<_>>()
        };
        let a = &me.assignment;
        let p = &m.proto;
        let answer = StreamsGroupHeartbeatResponse::default()
            .with_member_id(me.member_id.clone())
            .with_member_epoch(me.member_epoch)
            .with_heartbeat_interval_ms(millis(m.interval))
            .with_task_offset_interval_ms(millis(p.task_offset_interval))
            .with_acceptable_recovery_lag(p.acceptable_recovery_lag)
            .with_endpoint_information_epoch(p.endpoint_epoch)
            // Unchanged, as a null list says (the type's defaults are empty lists).
            .with_status(None)
            .with_partitions_by_user_endpoint(None)
            .with_active_tasks(Some(tasks(&a.active_tasks)))
            .with_standby_tasks(Some(tasks(&a.standby_tasks)))
            .with_warmup_tasks(Some(tasks(&a.warmup_tasks)));
        ReadBack::Record(answer, None)
    }

    fn leave(m: &StreamsMember, epoch: i32) -> Request {
        heartbeat_request(m.base_heartbeat(epoch))
    }

    fn reported_owned(sent: &Self::Heartbeat) -> bool {
        sent.is_some()
    }

    fn answered(
        m: &mut StreamsMember,
        sent_epoch: i32,
        owned: Self::Heartbeat,
        r: StreamsGroupHeartbeatResponse,
    ) {
        m.answered(sent_epoch, owned, r);
    }

    fn reconcile(m: &mut StreamsMember) {
        m.reconcile();
    }

    fn has_target(&self) -> bool {
        self.target.is_some()
    }

    fn forget_sent(&mut self, refused: bool) {
        self.last_sent = None;
        if refused {
            self.offsets_sent_at = None;
        }
    }

    fn subscribed(&self) -> bool {
        self.subscribed
    }

    fn unsubscribed(&mut self) {
        self.subscribed = false;
    }

    fn reset(&mut self) {
        self.last_sent = None;
        self.acked_owned = None;
        self.target = None;
        // A new membership: the coordinator asks again if it still wants the description
        // (Java clears topologyPushRequired on fencing); an answer to a push in flight is
        // ignored from now on.
        if self.push != Push::Stopped {
            self.push = Push::Idle;
        }
    }

    fn revoked(m: &mut StreamsMember, revoking: Self::Revoking) {
        for t in revoking {
            m.proto.owned.active.remove(&t);
            m.proto.process.release(m.member_id.as_str(), &t);
        }
    }

    fn release_except(m: &mut StreamsMember, revoking: &Self::Revoking) {
        let p = &mut m.proto;
        let mut released = p.owned.clone();
        released.active.retain(|t| !revoking.contains(t));
        for (t, _) in released.iter() {
            p.process.release(m.member_id.as_str(), t);
        }
        p.owned.standby.clear();
        p.owned.warmup.clear();
        p.owned.active.retain(|t| revoking.contains(t));
        if !released.is_empty() {
            m.emit(StreamsEvent::TasksReleased {
                tasks: released,
                owned: m.proto.owned.clone(),
                reason: ReleaseReason::Leaving,
            });
        }
    }

    fn lose(m: &mut StreamsMember, reason: Reason) {
        m.lose_all(reason);
    }

    fn release(m: &mut StreamsMember) {
        m.release_all(ReleaseReason::Leaving);
    }

    /// The input partitions of the active tasks handed to the application (revoking ones stay
    /// until the ticket is back); standby and warm-up tasks commit nothing.
    fn committable(m: &StreamsMember) -> BTreeSet<TopicPartition> {
        let topology = &m.proto.streams.topology;
        (m.proto.owned.active.iter())
            .flat_map(|t| topology.input_partitions(t))
            .collect()
    }

    fn command(m: &mut StreamsMember, now: Instant) {
        m.input(now);
    }

    fn settle(m: &mut StreamsMember) {
        m.guard_step();
    }

    fn unrouted(m: &mut StreamsMember) {
        m.check_lease();
        m.guard_step();
    }

    fn on_timers(m: &mut StreamsMember) {
        m.guard_step();
        if m.shell.expired(Timer::TaskGuard) {
            m.reconcile();
        }
    }

    /// Due at once when another local member waits for a task this member must give up.
    fn urgent_timer(m: &StreamsMember) -> Option<Timer> {
        (m.in_group() && m.proto.process.must_yield(m.member_id.as_str()))
            .then_some(Timer::TaskGuard)
    }

    fn acts_on(m: &StreamsMember, timer: Timer) -> bool {
        timer != Timer::TaskGuard || m.in_group()
    }

    fn closed(m: &mut StreamsMember) {
        m.forget_in_guard();
    }

    fn side_request(m: &mut StreamsMember, coordinator: &Broker) -> Option<RequestId> {
        m.push_request(coordinator)
    }

    fn side_answer(m: &mut StreamsMember, id: RequestId, result: Reply) {
        m.push_answered(id, result);
    }
}

impl StreamsMember {
    /// A member of `config.group_id` in `process`, not yet joined. Its KIP-1082 member id is
    /// `config.member_id`, else one derived from `config.seed` (the core reads no random
    /// source); with neither the configuration is refused. The topology is checked
    /// ([`StreamsTopology::validate`]).
    pub fn new(
        config: GroupConfig,
        streams: StreamsConfig,
        process: StreamsProcess,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        let member_id = member_id_of(&config)?;
        Self::with_member_id(config, streams, process, member_id, now)
    }

    /// A member with the given id, whatever `config.member_id` says.
    pub fn with_member_id(
        config: GroupConfig,
        streams: StreamsConfig,
        process: StreamsProcess,
        member_id: MemberId,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        let proto = StreamsProtocol {
            member_id,
            streams,
            process,
            subscribed: false,
            owned: StreamsTasks::default(),
            target: None,
            withheld: BTreeMap::new(),
            refused: RefusedTasks::default(),
            last_sent: None,
            acked_owned: None,
            task_offsets: BTreeMap::new(),
            task_end_offsets: BTreeMap::new(),
            task_offset_interval: Duration::ZERO,
            acceptable_recovery_lag: -1,
            offsets_sent_at: None,
            shutdown_requested: false,
            endpoint_epoch: -1,
            endpoints: BTreeMap::new(),
            statuses: Vec::new(),
            push: Push::Idle,
            events: std::collections::VecDeque::new(),
        };
        Self::create(config, member_id, now, proto)
    }

    // ------------------------------------------------------------------ accessors

    /// The tasks the application holds (active tasks being revoked included until the ticket
    /// comes back).
    pub fn tasks(&self) -> &StreamsTasks {
        &self.proto.owned
    }

    /// Tasks the coordinator assigned that the guard withholds (another local member holds
    /// them), with the role assigned.
    pub fn withheld(&self) -> &BTreeMap<TaskId, TaskRole> {
        &self.proto.withheld
    }

    /// The tasks of the latest assignment this member refused: those of subtopologies its
    /// topology does not have ([`StreamsEvent::TasksRefused`]).
    pub fn refused(&self) -> &RefusedTasks {
        &self.proto.refused
    }

    /// The statuses of the latest answer that carried any.
    pub fn statuses(&self) -> &[StreamsStatus] {
        &self.proto.statuses
    }

    /// The endpoints-to-partitions map of the latest answer that carried one, and its epoch.
    pub fn endpoints(&self) -> (i32, &BTreeMap<UserEndpoint, EndpointPartitions>) {
        (self.proto.endpoint_epoch, &self.proto.endpoints)
    }

    /// The process the member belongs to.
    pub fn process(&self) -> &StreamsProcess {
        &self.proto.process
    }

    // ------------------------------------------------------------------ commands

    /// Joins the group with the topology (epoch 0). Errors with [`ApiMisuse::Stopped`] once
    /// [`close`](Self::close) was called or the member stopped.
    pub fn join(&mut self, now: Instant) -> Result<(), ApiMisuse> {
        self.input(now);
        if self.closing() {
            return Err(ApiMisuse::Stopped);
        }
        self.proto.subscribed = true;
        self.shell.timers.set(
            Timer::PollInterval,
            crate::machine::timer::after(now, self.shell.config.max_poll_interval),
        );
        if matches!(self.phase, Phase::Unsubscribed | Phase::Stale) {
            self.join_group(Reason::Subscribed);
        }
        Ok(())
    }

    /// Leaves the group: tasks released ([`StreamsEvent::TasksReleased`]), then the leave
    /// heartbeat (-1; -2 for a static member, which keeps its tasks at the broker for a return
    /// within the session timeout). Does nothing once [`close`](Self::close) was called.
    pub fn unsubscribe(&mut self, now: Instant) {
        self.leave_subscription(CloseOptions::Default, now);
    }

    /// Leaves the group for good with epoch -1, static member or not (the broker forgets the
    /// instance id and reassigns the tasks at once). Does nothing once `close` was called.
    pub fn leave_group(&mut self, now: Instant) {
        self.leave_subscription(CloseOptions::LeaveGroup, now);
    }

    /// The application's changelog offsets (`offsets`) and end offsets (`end_offsets`) per
    /// task, summed over the task's changelogs: reported with the next heartbeat once
    /// `task_offset_interval_ms` passed (or at once when a warm-up task caught up), each only
    /// when it changed since last sent.
    pub fn set_task_offsets(
        &mut self,
        offsets: BTreeMap<TaskId, i64>,
        end_offsets: BTreeMap<TaskId, i64>,
    ) {
        self.proto.task_offsets = offsets;
        self.proto.task_end_offsets = end_offsets;
    }

    /// Commits `offsets` for input partitions of the member's active tasks (those being revoked
    /// too, until the ticket is back) with the member id and epoch (OffsetCommit v9+; Kafka
    /// Streams commits its tasks' input offsets through the group the same way). The outcome
    /// arrives as [`StreamsEvent::Committed`]. Refused at once, typed: outside the group
    /// ([`CommitError::NotMember`]), after the tasks were lost ([`CommitError::LeaseExpired`] or
    /// the stop's error), and for a partition that is not an input of an active task held now
    /// ([`CommitError::NotOwned`]: a standby's, a revoked task's, another member's).
    ///
    /// [`CommitError::NotMember`]: crate::error::CommitError::NotMember
    /// [`CommitError::LeaseExpired`]: crate::error::CommitError::LeaseExpired
    /// [`CommitError::NotOwned`]: crate::error::CommitError::NotOwned
    pub fn commit(&mut self, offsets: Vec<CommitOffset>, now: Instant) -> CommitId {
        self.commit_offsets(offsets, now)
    }

    /// Fetches the committed offsets of `partitions` (OffsetFetch v9+ with the member id and
    /// epoch while in the group), e.g. [`input_partitions`](Self::input_partitions) of a task
    /// just assigned. The outcome arrives as [`StreamsEvent::OffsetsFetched`]; a partition with
    /// no commit comes back with `None`.
    pub fn fetch_offsets(&mut self, partitions: Vec<TopicPartition>, now: Instant) -> FetchId {
        self.queue_fetch(partitions, now)
    }

    /// The input partitions of `task` in this member's topology (see
    /// [`StreamsTopology::input_partitions`]).
    pub fn input_partitions(&self, task: &TaskId) -> Vec<TopicPartition> {
        self.proto.streams.topology.input_partitions(task)
    }

    /// Asks every member of the application to shut down (`ShutdownApplication` on every
    /// heartbeat from now on; the others see [`StatusCode::ShutdownApplication`]).
    pub fn request_shutdown(&mut self, now: Instant) {
        self.input(now);
        self.proto.shutdown_requested = true;
        if self.in_group() {
            self.shell.timers.stop(Timer::Heartbeat);
        }
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<StreamsEvent> {
        while let Some(error) = self.shell.lookup_failure() {
            self.fail(error);
        }
        self.flush();
        self.proto.events.pop_front()
    }

    // ------------------------------------------------------------------ events

    /// Moves the shell's events (state changes) into the member's queue, in order.
    fn flush(&mut self) {
        while let Some(e) = self.shell.events.pop_front() {
            match StreamsEvent::from_shared(e) {
                Ok(e) => self.proto.events.push_back(e),
                Err(other) => {
                    tracing::debug!(event = ?other, "streams member: no streams form of this event")
                }
            }
        }
    }

    fn emit(&mut self, e: StreamsEvent) {
        self.flush();
        self.proto.events.push_back(e);
    }

    // ------------------------------------------------------------------ the guard

    /// Gives up, at once and without a ticket, the standby and warm-up tasks another local
    /// member was assigned as active (the guard's liveness rule), and reports them released.
    fn guard_step(&mut self) {
        if !self.in_group() {
            return;
        }
        let gave_up = self.proto.process.yield_to_active(self.member_id.as_str());
        if gave_up.is_empty() {
            return;
        }
        let mut released = StreamsTasks::default();
        for g in &gave_up {
            self.proto.owned.standby.remove(&g.task);
            self.proto.owned.warmup.remove(&g.task);
            released.of_mut(g.role).insert(g.task.clone());
        }
        for g in gave_up {
            self.emit(StreamsEvent::GuardIntervened(g));
        }
        self.emit(StreamsEvent::TasksReleased {
            tasks: released,
            owned: self.proto.owned.clone(),
            reason: ReleaseReason::GivenUpToActive,
        });
        // The next heartbeat reports it, now; what the target still names is withheld from now
        // on (the active assignment reserves it).
        self.shell.timers.stop(Timer::Heartbeat);
        self.reconcile();
    }

    // ------------------------------------------------------------------ reconciliation

    /// An error-free answer for this member (see [`EpochProtocol::answered`]).
    fn answered(
        &mut self,
        sent_epoch: i32,
        owned: Option<StreamsTasks>,
        r: StreamsGroupHeartbeatResponse,
    ) {
        // Tasks: all three lists or none (StreamsMembershipManager.onHeartbeatSuccess), split
        // into the tasks this member can run and those of subtopologies its topology lacks,
        // which it refuses (see `refuse`).
        let target = match (&r.active_tasks, &r.standby_tasks, &r.warmup_tasks) {
            (Some(a), Some(s), Some(w)) => {
                let (tasks, refused) = tasks_from_wire([a, s, w], &self.proto.streams.topology);
                Some((tasks.normalized(), refused))
            }
            (None, None, None) => None,
            _ => {
                return self.fail(invalid::<StreamsProtocol>(
                    "active, standby and warm-up tasks must be all null or all non-null",
                ));
            }
        };
        self.accept(r.member_epoch);
        if let Some(owned) = owned {
            self.proto.acked_owned = Some(owned);
        } else if sent_epoch == 0 {
            self.proto.acked_owned = Some(StreamsTasks::default());
        }
        if sent_epoch == 0 {
            // A static member that rejoins under its kept member id replaces its own -2 entry:
            // the broker records the join's task offsets first, then `replaceStreamsMember`
            // removes the old member and with it `taskOffsets[memberId]`
            // (StreamsGroup.removeMember). Report them again when next due, or a warm-up of
            // this member is never found caught up.
            if let Some(last) = &mut self.proto.last_sent {
                last.offsets = None;
                last.end_offsets = None;
            }
        }
        if let Some((t, refused)) = &target
            && self.drops_unowned(t, refused)
        {
            // The coordinator keeps a member whose assignment shrank at its epoch, the dropped
            // tasks pending revocation, until a heartbeat lists its owned tasks without them
            // (CurrentAssignmentBuilder.build, UNREVOKED_TASKS: owned tasks absent from the
            // request, a null list meaning "unchanged", or still naming a revoked task keep it
            // there; GroupMetadataManager.maybeReconcile reads them only when all three lists
            // are present). A dropped task this member never took (withheld by the guard,
            // refused) leaves its owned tasks as they were, so nothing else would list them:
            // list them and acknowledge at once.
            if let Some(last) = &mut self.proto.last_sent {
                last.owned = None;
            }
            self.proto.acked_owned = None;
        }
        self.description_asked(r.topology_description_required);
        self.proto.task_offset_interval =
            Duration::from_millis(r.task_offset_interval_ms.max(0) as u64);
        self.proto.acceptable_recovery_lag = r.acceptable_recovery_lag;
        if let Some(statuses) = &r.status {
            let statuses = statuses_from_wire(statuses);
            if statuses != self.proto.statuses {
                self.proto.statuses = statuses.clone();
                self.emit(StreamsEvent::StatusChanged { statuses });
            }
        }
        let epoch_changed = r.endpoint_information_epoch != self.proto.endpoint_epoch;
        self.proto.endpoint_epoch = r.endpoint_information_epoch;
        if let Some(entries) = &r.partitions_by_user_endpoint {
            let endpoints = endpoints_from_wire(entries);
            if epoch_changed || endpoints != self.proto.endpoints {
                self.proto.endpoints = endpoints.clone();
                self.emit(StreamsEvent::EndpointsChanged {
                    epoch: self.proto.endpoint_epoch,
                    endpoints,
                });
            }
        }
        if let Some((t, refused)) = target {
            self.refuse(refused);
            // Waits for tasks the new target no longer names end now, also while a revocation
            // defers the reconciliation: they must not keep another local member's task
            // reserved.
            self.proto
                .process
                .retain_claims(self.member_id.as_str(), |task, r| {
                    t.role_of(task) == Some(r)
                });
            self.proto
                .withheld
                .retain(|task, r| t.role_of(task) == Some(*r));
            self.proto.target = Some(t);
        }
    }

    /// Whether the assignment `t` (with `refused`) drops, in its role, a task the previous one
    /// named and this member does not hold in that role.
    fn drops_unowned(&self, t: &StreamsTasks, refused: &RefusedTasks) -> bool {
        let p = &self.proto;
        let withheld_gone = p.target.as_ref().is_some_and(|old| {
            old.iter()
                .any(|(task, r)| t.role_of(task) != Some(r) && p.owned.role_of(task) != Some(r))
        });
        let old = &p.refused;
        let refused_gone = [
            (&old.active, &refused.active),
            (&old.standby, &refused.standby),
            (&old.warmup, &refused.warmup),
        ]
        .into_iter()
        .any(|(o, n)| {
            o.iter()
                .any(|(sub, ps)| n.get(sub).is_none_or(|q| !ps.is_subset(q)))
        });
        withheld_gone || refused_gone
    }

    /// Release what the target dropped (standby and warm-up at once, active tasks with a
    /// ticket), then take what it adds, through the guard, then report
    /// (StreamsMembershipManager.maybeReconcile).
    fn reconcile(&mut self) {
        if !matches!(
            self.phase,
            Phase::Joining | Phase::Reconciling | Phase::Acknowledging | Phase::Stable
        ) {
            return;
        }
        let Some(target) = self.proto.target.clone() else {
            if matches!(self.phase, Phase::Joining) {
                self.set_phase(Phase::Stable, Reason::Joined);
            }
            return;
        };
        let me = self.member_id.to_string();
        // Standby and warm-up tasks the target no longer names in any role: released now.
        // One it names in another role changes role in place below.
        let mut released = StreamsTasks::default();
        for role in [TaskRole::Standby, TaskRole::Warmup] {
            let gone: Vec<TaskId> = self
                .proto
                .owned
                .of(role)
                .iter()
                .filter(|t| target.role_of(t).is_none())
                .cloned()
                .collect();
            for t in gone {
                self.proto.owned.of_mut(role).remove(&t);
                self.proto.process.release(&me, &t);
                released.of_mut(role).insert(t);
            }
        }
        if !released.is_empty() {
            self.emit(StreamsEvent::TasksReleased {
                tasks: released,
                owned: self.proto.owned.clone(),
                reason: ReleaseReason::Unassigned,
            });
        }
        // Active tasks the target takes away (or demotes): revoked with a ticket first.
        let revoked: BTreeSet<TaskId> = self
            .proto
            .owned
            .active
            .iter()
            .filter(|t| !target.active.contains(*t))
            .cloned()
            .collect();
        self.proto
            .process
            .retain_claims(&me, |t, r| target.role_of(t) == Some(r));
        if !revoked.is_empty() {
            self.proto.withheld.clear();
            let active = revoked.iter().cloned().collect();
            return self.start_revocation(revoked, |m, ticket| {
                m.emit(StreamsEvent::TasksRevoking { active, ticket })
            });
        }
        let wanted: Vec<(TaskId, TaskRole)> = target
            .iter()
            .filter(|(t, r)| self.proto.owned.role_of(t) != Some(*r))
            .map(|(t, r)| (t.clone(), r))
            .collect();
        if !wanted.is_empty() && self.report_pending() {
            // A heartbeat on its way lists what this member owned when it went out; the broker
            // would read it as the current ownership (CurrentAssignmentBuilder.hasNotReleased).
            // Take the tasks once it is answered (as the consumer member).
            return self.set_phase(Phase::Reconciling, Reason::AwaitingHeartbeat);
        }
        let mut added = StreamsTasks::default();
        let mut withheld = BTreeMap::new();
        for (t, role) in wanted {
            match self.proto.process.acquire(&me, &t, role) {
                Acquire::Granted => {
                    for r in ROLES {
                        self.proto.owned.of_mut(r).remove(&t);
                    }
                    self.proto.owned.of_mut(role).insert(t.clone());
                    added.of_mut(role).insert(t);
                }
                Acquire::Withheld {
                    holder,
                    holder_role,
                    new,
                } => {
                    if new {
                        self.emit(StreamsEvent::GuardIntervened(Intervention {
                            kind: InterventionKind::Withheld,
                            task: t.clone(),
                            role,
                            other_member: holder,
                            other_role: holder_role,
                        }));
                    }
                    withheld.insert(t, role);
                }
            }
        }
        self.proto.withheld = withheld;
        if !added.is_empty() || matches!(self.phase, Phase::Joining) {
            self.emit(StreamsEvent::TasksAssigned {
                added,
                owned: self.proto.owned.clone(),
                epoch: self.epoch,
            });
        }
        if self.proto.withheld.is_empty() {
            self.shell.timers.stop(Timer::TaskGuard);
        } else {
            let wait = if self.interval.is_zero() {
                GUARD_RECHECK
            } else {
                self.interval.min(GUARD_RECHECK)
            };
            self.shell.timers.set(
                Timer::TaskGuard,
                crate::machine::timer::after(self.shell.now, wait),
            );
        }
        let acked = self.proto.acked_owned.as_ref() == Some(&self.proto.owned);
        let waiting = (!self.proto.withheld.is_empty()).then_some(Reason::TaskWithheld);
        self.reconciled(acked, waiting);
    }

    /// Records the tasks of the latest assignment whose subtopologies this member's topology
    /// lacks, and tells the application when they changed. They are never taken: not handed to
    /// the application, not claimed in the guard, never listed as owned.
    ///
    /// The coordinator assigns them when the group runs another topology than this member's. The
    /// group's topology is the one its first member declared (GroupMetadataManager
    /// .maybeUpdateTopology: set only while the group has none, kept while the group exists); a
    /// later member declaring a lower topology epoch is accepted with the group's topology, not
    /// refused ("joined with stale topology epoch", answered with the STALE_TOPOLOGY status,
    /// maybeSetTopologyStaleStatus), and the assignor gives every member tasks of the group's
    /// topology (TargetAssignmentBuilder over all members and the group's ConfiguredTopology).
    /// So whichever client joined the group first, with a higher topology epoch than this
    /// member's, decides the subtopologies this member is assigned: it must not be able to stop
    /// this member through the coordinator. Not listing them
    /// as owned is consistent for the coordinator: it checks the owned tasks only as a subset of
    /// the assigned ones (areOwnedTasksContainedInAssignedTasks) and for revocations
    /// (CurrentAssignmentBuilder.hasNotReleased), so taking them away again needs no revocation,
    /// only the owned tasks listed once more (`drops_unowned`).
    fn refuse(&mut self, refused: RefusedTasks) {
        if refused == self.proto.refused {
            return;
        }
        if !refused.is_empty() {
            let stale = self
                .proto
                .statuses
                .iter()
                .any(|s| s.code == StatusCode::StaleTopology);
            tracing::warn!(
                group = %self.shell.config.group_id,
                member_id = %self.member_id,
                unknown_subtopologies = ?refused.subtopologies(),
                refused = ?refused,
                topology_epoch = self.proto.streams.topology.epoch,
                stale_topology = stale,
                "the coordinator assigned tasks of subtopologies this member's topology does not have (the group runs another topology); not taking them"
            );
        }
        self.proto.refused = refused.clone();
        self.emit(StreamsEvent::TasksRefused { refused });
    }

    /// Releases, without a ticket, everything the application holds (close, unsubscribe).
    fn release_all(&mut self, reason: ReleaseReason) {
        let tasks = std::mem::take(&mut self.proto.owned);
        self.forget_in_guard();
        if !tasks.is_empty() {
            self.emit(StreamsEvent::TasksReleased {
                tasks,
                owned: StreamsTasks::default(),
                reason,
            });
        }
    }

    /// Loses everything the application holds, the tasks of a revocation ticket included
    /// (fenced, stopped, poll timeout): [`StreamsEvent::TasksLost`].
    fn lose_all(&mut self, reason: Reason) {
        let tasks = std::mem::take(&mut self.proto.owned);
        self.forget_in_guard();
        if !tasks.is_empty() {
            self.emit(StreamsEvent::TasksLost { tasks, reason });
        }
    }

    fn forget_in_guard(&mut self) {
        self.proto.withheld.clear();
        self.shell.timers.stop(Timer::TaskGuard);
        self.proto.process.forget(self.member_id.as_str());
    }

    // ------------------------------------------------------------------ topology description

    /// An error-free heartbeat answer, asking for the topology description (`required`) or
    /// not (KIP-1331; StreamsGroupHeartbeatRequestManager.onResponse): a push becomes due when
    /// the member has a description and none is in flight or stopped; a push that failed
    /// retriably is due again at every answer.
    fn description_asked(&mut self, required: bool) {
        let configured = self.proto.streams.topology_description.is_some();
        match self.proto.push {
            Push::Idle if required && configured => {
                tracing::info!(group = %self.shell.config.group_id, topology_epoch = self.proto.streams.topology.epoch, "the coordinator asked for the topology description");
                self.proto.push = Push::Due;
            }
            Push::Idle if required => {
                tracing::debug!(group = %self.shell.config.group_id, "the coordinator asked for a topology description; none is configured");
            }
            Push::Retry => self.proto.push = Push::Due,
            Push::Idle | Push::Due | Push::InFlight(_) | Push::Stopped => {}
        }
    }

    /// The push, when due (see [`EpochProtocol::side_request`]).
    fn push_request(&mut self, coordinator: &Broker) -> Option<RequestId> {
        if self.proto.push != Push::Due {
            return None;
        }
        let Some(description) = &self.proto.streams.topology_description else {
            self.proto.push = Push::Idle;
            return None;
        };
        let body = StreamsGroupTopologyDescriptionUpdateRequest::default()
            .with_group_id(self.shell.group_id())
            .with_member_id(str_bytes(self.member_id.as_str()))
            .with_topology_epoch(self.proto.streams.topology.epoch)
            .with_topology_description(description.to_wire());
        let request = Request::StreamsGroupTopologyDescriptionUpdate {
            body: Box::new(body),
            versions: PUSH_VERSIONS,
        };
        let id = self.send(coordinator, request, Sent::Side);
        self.proto.push = Push::InFlight(id);
        Some(id)
    }

    /// The outcome of push `id` (StreamsGroupTopologyDescriptionRequestManager.onResponse):
    /// retriable failures wait for the next heartbeat answer; every other outcome ends the
    /// push (the coordinator asks again when it wants one), and UNSUPPORTED_VERSION,
    /// INVALID_REQUEST or a broker without the API stop the pushes at this topology epoch.
    fn push_answered(&mut self, id: RequestId, result: Reply) {
        if self.proto.push != Push::InFlight(id) {
            // Answers a membership the member left since, or a push it no longer waits for.
            return;
        }
        let group = self.shell.config.group_id.clone();
        let message =
            |m: &Option<kafka_protocol::protocol::StrBytes>| m.as_deref().map(str::to_owned);
        let outcome = match result {
            Ok(Response {
                body: ResponseBody::StreamsGroupTopologyDescriptionUpdate(r),
                ..
            }) => {
                let msg = message(&r.error_message);
                match r.error_code {
                    codes::NONE => Ok(()),
                    codes::NOT_COORDINATOR | codes::COORDINATOR_NOT_AVAILABLE => {
                        tracing::info!(%group, code = r.error_code, "topology description push: the coordinator moved; retrying after the next heartbeat");
                        self.shell.coordinator_failed();
                        self.proto.push = Push::Retry;
                        return;
                    }
                    codes::COORDINATOR_LOAD_IN_PROGRESS => {
                        self.proto.push = Push::Retry;
                        return;
                    }
                    codes::STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED => {
                        Err(DescriptionPushError::UpdateFailed { message: msg })
                    }
                    codes::UNSUPPORTED_VERSION => {
                        Err(DescriptionPushError::Unsupported { message: msg })
                    }
                    codes::INVALID_REQUEST => {
                        Err(DescriptionPushError::InvalidRequest { message: msg })
                    }
                    code @ (codes::UNKNOWN_MEMBER_ID | codes::GROUP_ID_NOT_FOUND) => {
                        Err(DescriptionPushError::NotMember { code, message: msg })
                    }
                    codes::GROUP_AUTHORIZATION_FAILED => {
                        Err(DescriptionPushError::Authorization { message: msg })
                    }
                    code => Err(DescriptionPushError::Other { code, message: msg }),
                }
            }
            Ok(other) => Err(DescriptionPushError::Other {
                code: codes::NONE,
                message: Some(format!("the answer is a {} response", other.body.api())),
            }),
            Err(TransportError::UnsupportedApi { .. }) => Err(DescriptionPushError::Unsupported {
                message: Some("the broker has no StreamsGroupTopologyDescriptionUpdate API".into()),
            }),
            Err(e) => {
                tracing::info!(%group, error = %e, "topology description push failed in the transport; retrying after the next heartbeat");
                self.shell.coordinator_failed();
                self.proto.push = Push::Retry;
                return;
            }
        };
        self.proto.push = match &outcome {
            Err(
                DescriptionPushError::Unsupported { .. }
                | DescriptionPushError::InvalidRequest { .. },
            ) => Push::Stopped,
            _ => Push::Idle,
        };
        let topology_epoch = self.proto.streams.topology.epoch;
        match &outcome {
            Ok(()) => tracing::info!(%group, topology_epoch, "topology description stored"),
            Err(e) => {
                tracing::warn!(%group, topology_epoch, error = %e, "topology description push failed")
            }
        }
        self.emit(StreamsEvent::TopologyDescriptionPushed {
            topology_epoch,
            result: outcome,
        });
    }

    // ------------------------------------------------------------------ requests

    fn base_heartbeat(&self, epoch: i32) -> StreamsGroupHeartbeatRequest {
        StreamsGroupHeartbeatRequest::default()
            .with_group_id(self.shell.group_id())
            .with_member_id(str_bytes(self.member_id.as_str()))
            .with_member_epoch(epoch)
            .with_endpoint_information_epoch(self.proto.endpoint_epoch)
            // The Java client sends the instance id on every heartbeat.
            .with_instance_id(self.shell.config.instance_id.as_deref().map(str_bytes))
            .with_rebalance_timeout_ms(-1)
    }

    /// An epoch-0 join carries everything; later heartbeats the owned tasks only when they
    /// changed since last sent, and task offsets when due and changed
    /// (StreamsGroupHeartbeatRequestManager.HeartbeatState.buildRequestData). After any failure
    /// the member forgets what it sent: the next heartbeat lists everything again.
    fn heartbeat_request(&mut self) -> (Request, Option<StreamsTasks>) {
        let now = self.shell.now;
        let joining = self.epoch == 0;
        let mut r = self.base_heartbeat(self.epoch);
        let mut last = if joining {
            LastSent::default()
        } else {
            self.proto.last_sent.clone().unwrap_or_default()
        };
        if joining {
            let process_id = self.proto.process.process_id();
            r.topology = Some(self.proto.streams.topology.to_wire());
            r.rebalance_timeout_ms = millis(self.shell.config.max_poll_interval);
            r.process_id = Some(str_bytes(&process_id));
            r.user_endpoint = self.proto.process.endpoint().map(|e| {
                req::Endpoint::default()
                    .with_host(str_bytes(&e.host))
                    .with_port(e.port)
            });
            r.rack_id = self.shell.config.rack_id.as_deref().map(str_bytes);
            r.client_tags = Some(
                self.proto
                    .streams
                    .client_tags
                    .iter()
                    .map(|(k, v)| {
                        req::KeyValue::default()
                            .with_key(str_bytes(k))
                            .with_value(str_bytes(v))
                    })
                    .collect(),
            );
        }
        let list_owned = joining || last.owned.as_ref() != Some(&self.proto.owned);
        if list_owned {
            r.active_tasks = Some(tasks_to_wire(&self.proto.owned.active));
            r.standby_tasks = Some(tasks_to_wire(&self.proto.owned.standby));
            r.warmup_tasks = Some(tasks_to_wire(&self.proto.owned.warmup));
            last.owned = Some(self.proto.owned.clone());
        }
        // A caught-up warm-up repeats its offsets on every heartbeat until the coordinator
        // promotes it: what the coordinator holds may not be what the member last sent (a
        // heartbeat of an abandoned connection processed after a newer one is accepted at the
        // previous epoch, `throwIfStreamsGroupMemberEpochIsInvalid`, and its offsets replace
        // the newer ones; a rejoin drops them), and nothing else would send them again.
        let hot = self.hot_warmup();
        let due = joining
            || list_owned
            || self.proto.offsets_sent_at.is_none_or(|at| {
                now >= crate::machine::timer::after(at, self.proto.task_offset_interval)
            })
            || hot;
        if due {
            if joining || hot || last.offsets.as_ref() != Some(&self.proto.task_offsets) {
                r.task_offsets = Some(offsets_to_wire(&self.proto.task_offsets));
                last.offsets = Some(self.proto.task_offsets.clone());
                self.proto.offsets_sent_at = Some(now);
            }
            if joining || hot || last.end_offsets.as_ref() != Some(&self.proto.task_end_offsets) {
                r.task_end_offsets = Some(offsets_to_wire(&self.proto.task_end_offsets));
                last.end_offsets = Some(self.proto.task_end_offsets.clone());
                self.proto.offsets_sent_at = Some(now);
            }
        }
        r.shutdown_application = self.proto.shutdown_requested;
        self.proto.last_sent = Some(last);
        let owned = list_owned.then(|| self.proto.owned.clone());
        (heartbeat_request(r), owned)
    }

    /// A warm-up task whose offset is within the acceptable recovery lag of its end offset:
    /// the broker should hear at once (hasAtLeastOneHotWarmupTask).
    fn hot_warmup(&self) -> bool {
        self.proto.owned.warmup.iter().any(|t| {
            match (
                self.proto.task_offsets.get(t),
                self.proto.task_end_offsets.get(t),
            ) {
                (Some(&o), Some(&e)) if o != i64::MAX && e != i64::MAX => {
                    self.proto.acceptable_recovery_lag >= 0
                        && e - o <= self.proto.acceptable_recovery_lag
                }
                _ => false,
            }
        })
    }
}
