//! The streams member's state machine; its rules are the docs of the parent module.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::config::GroupConfig;
use crate::error::{
    ApiMisuse, ConfigError, ErrorAction, GroupError, TransportError, classify, codes,
};
use crate::machine::events::{CloseOptions, Event, MemberState, Reason, RevokeTicket};
use crate::machine::session;
use crate::machine::shell::{PhaseName, Shell, epoch_lease_bound, millis, phases};
use crate::machine::timer::Timer;
use crate::member_id::MemberId;
use crate::messages::streams_group_heartbeat_request as req;
use crate::messages::{StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse};
use crate::request::{
    Api, Broker, Outbound, Reply, Request, RequestId, Response, ResponseBody, Target,
};

use super::guard::{Acquire, Intervention, InterventionKind, StreamsProcess};
use super::topology::{
    EndpointPartitions, ROLES, RefusedTasks, StatusCode, StreamsStatus, StreamsTasks,
    StreamsTopology, TaskId, TaskRole, UserEndpoint, endpoints_from_wire, offsets_to_wire,
    statuses_from_wire, str_bytes, tasks_from_wire, tasks_to_wire,
};
use super::{ReleaseReason, StreamsEvent};

/// How often a static member recovers from UNRELEASED_INSTANCE_ID caused by its own earlier join
/// before it gives up (as the consumer member).
pub const UNRELEASED_RECOVERIES: u32 = 3;
/// StreamsGroupHeartbeat v0-1: the request is the same at both; v1 answers carry
/// `AcceptableRecoveryLag` (and may carry MISSING_CLIENT_TAGS).
const HEARTBEAT_VERSIONS: std::ops::RangeInclusive<i16> = 0..=1;
/// Epochs with a meaning of their own (StreamsGroupHeartbeatRequest.json).
const LEAVE_EPOCH: i32 = -1;
const STATIC_LEAVE_EPOCH: i32 = -2;
/// The longest a member withholding a task waits before it asks the guard again.
pub const GUARD_RECHECK: Duration = Duration::from_millis(250);
/// The API the member speaks.
const API: Api = Api::STREAMS_GROUP_HEARTBEAT;

/// What a streams member declares besides the group settings of [`GroupConfig`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamsConfig {
    /// The application's topology.
    pub topology: StreamsTopology,
    /// Client tags for rack-aware standby placement (`client.tag.*`).
    pub client_tags: BTreeMap<String, String>,
}

impl StreamsConfig {
    /// A member of an application with `topology` and no client tags.
    pub fn new(topology: StreamsTopology) -> Self {
        Self {
            topology,
            client_tags: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Phase {
    Unsubscribed,
    /// Sending epoch-0 heartbeats until the coordinator answers.
    Joining,
    /// Applying the target: waiting for a heartbeat in flight, or for tasks the guard withholds.
    Reconciling,
    /// Revoked active tasks are with the application; the rest waits for the ticket.
    AwaitRevoke {
        ticket: u64,
        /// Still reported as owned until the ticket comes back.
        revoking: BTreeSet<TaskId>,
    },
    /// The next heartbeat reports the owned tasks, sent at once.
    Acknowledging,
    Stable,
    /// Left on poll timeout; the next poll rejoins.
    Stale,
    /// A leave heartbeat is due (`request` None) or in flight.
    Leaving {
        epoch: i32,
        request: Option<RequestId>,
        then: AfterLeave,
    },
    Closed,
    Fatal(GroupError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterLeave {
    Close,
    Unsubscribe,
    Stale,
    /// UNRELEASED_INSTANCE_ID recovery: rejoin at epoch 0.
    Rejoin,
}

phases!(
    Unsubscribed,
    Joining,
    Reconciling,
    AwaitRevoke { .. },
    Acknowledging,
    Stable,
    Stale,
    Leaving { .. },
    Closed,
    Fatal(_)
);

/// What the last heartbeats carried of the fields sent only when they change
/// (StreamsGroupHeartbeatRequestManager.HeartbeatState.LastSentFields); `None` in the member
/// makes the next heartbeat full.
#[derive(Debug, Clone, PartialEq, Default)]
struct LastSent {
    owned: Option<StreamsTasks>,
    offsets: Option<BTreeMap<TaskId, i64>>,
    end_offsets: Option<BTreeMap<TaskId, i64>>,
}

#[derive(Debug, Clone)]
pub(crate) enum Sent {
    Heartbeat {
        epoch: i32,
        incarnation: u64,
        /// The owned tasks it listed, if it listed them.
        owned: Option<StreamsTasks>,
    },
    Leave,
    /// A DescribeConfigs reading the group's session timeout.
    SessionRead(session::Step),
}

/// What the broker may know of a member (as the consumer member).
#[derive(Debug, Clone, Copy, Default)]
struct Registration {
    join_sent: bool,
    may_be_registered: bool,
    unreleased_recoveries: u32,
}

/// A KIP-1071 streams-group member (sans-IO); its state diagram, identity rules and the task
/// guard's rules are the docs of [`machine::streams`](crate::machine::streams).
#[derive(Debug)]
pub struct StreamsMember {
    shell: Shell<Sent>,
    member_id: MemberId,
    epoch: i32,
    phase: Phase,
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
    heartbeat_in_flight: Option<RequestId>,
    incarnation: u64,
    heartbeat_failures: u32,
    interval: Duration,
    last_sent: Option<LastSent>,
    /// The owned tasks as of the last answered heartbeat that listed them.
    acked_owned: Option<StreamsTasks>,
    /// A heartbeat that listed owned tasks failed in the transport; until a later one is
    /// answered no task is taken (the broker may still read that stale list).
    owned_report_unsettled: bool,
    registration: Registration,
    answered_once: bool,
    deferred_leave: Option<(CloseOptions, AfterLeave, Reason)>,
    /// The read of the group's session timeout, when configured.
    session_read: session::SessionRead,
    task_offsets: BTreeMap<TaskId, i64>,
    task_end_offsets: BTreeMap<TaskId, i64>,
    task_offset_interval: Duration,
    acceptable_recovery_lag: i64,
    offsets_sent_at: Option<Instant>,
    shutdown_requested: bool,
    endpoint_epoch: i32,
    endpoints: BTreeMap<UserEndpoint, EndpointPartitions>,
    statuses: Vec<StreamsStatus>,
    events: std::collections::VecDeque<StreamsEvent>,
}

impl Drop for StreamsMember {
    fn drop(&mut self) {
        // A member that goes away holds nothing the other members of its process must wait for.
        self.process.forget(self.member_id.as_str());
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
        let member_id = match config.member_id {
            Some(id) => id,
            None => {
                config.validate()?;
                MemberId::from_seed(config.jitter_seed()?)
            }
        };
        Self::with_member_id(config, streams, process, member_id, now)
    }

    /// A member with the given id, whatever `config.member_id` says.
    pub fn with_member_id(
        mut config: GroupConfig,
        streams: StreamsConfig,
        process: StreamsProcess,
        member_id: MemberId,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        streams.topology.validate()?;
        config.member_id = Some(member_id);
        let seed = config.jitter_seed()?;
        Ok(Self {
            member_id,
            epoch: 0,
            phase: Phase::Unsubscribed,
            streams,
            process,
            subscribed: false,
            owned: StreamsTasks::default(),
            target: None,
            withheld: BTreeMap::new(),
            refused: RefusedTasks::default(),
            heartbeat_in_flight: None,
            incarnation: 0,
            heartbeat_failures: 0,
            interval: Duration::ZERO,
            last_sent: None,
            acked_owned: None,
            owned_report_unsettled: false,
            registration: Registration::default(),
            answered_once: false,
            deferred_leave: None,
            session_read: session::SessionRead::default(),
            task_offsets: BTreeMap::new(),
            task_end_offsets: BTreeMap::new(),
            task_offset_interval: Duration::ZERO,
            acceptable_recovery_lag: -1,
            offsets_sent_at: None,
            shutdown_requested: false,
            endpoint_epoch: -1,
            endpoints: BTreeMap::new(),
            statuses: Vec::new(),
            events: std::collections::VecDeque::new(),
            shell: Shell::new(config, now, seed),
        })
    }

    // ------------------------------------------------------------------ accessors

    /// The member id, the same for the member's whole life.
    pub fn member_id(&self) -> &str {
        self.member_id.as_str()
    }

    /// The member epoch (0 before the first answer and after fencing).
    pub fn epoch(&self) -> i32 {
        self.epoch
    }

    /// Where the member stands.
    pub fn state(&self) -> MemberState {
        self.phase.state()
    }

    /// The tasks the application holds (active tasks being revoked included until the ticket
    /// comes back).
    pub fn tasks(&self) -> &StreamsTasks {
        &self.owned
    }

    /// Tasks the coordinator assigned that the guard withholds (another local member holds
    /// them), with the role assigned.
    pub fn withheld(&self) -> &BTreeMap<TaskId, TaskRole> {
        &self.withheld
    }

    /// The tasks of the latest assignment this member refused: those of subtopologies its
    /// topology does not have ([`StreamsEvent::TasksRefused`]).
    pub fn refused(&self) -> &RefusedTasks {
        &self.refused
    }

    /// The statuses of the latest answer that carried any.
    pub fn statuses(&self) -> &[StreamsStatus] {
        &self.statuses
    }

    /// The endpoints-to-partitions map of the latest answer that carried one, and its epoch.
    pub fn endpoints(&self) -> (i32, &BTreeMap<UserEndpoint, EndpointPartitions>) {
        (self.endpoint_epoch, &self.endpoints)
    }

    /// The process the member belongs to.
    pub fn process(&self) -> &StreamsProcess {
        &self.process
    }

    /// The coordinator, when known.
    pub fn coordinator(&self) -> Option<&Broker> {
        self.shell.coordinator()
    }

    /// The configuration.
    pub fn config(&self) -> &GroupConfig {
        &self.shell.config
    }

    /// Whether the coordinator ever answered a heartbeat successfully.
    pub fn answered_once(&self) -> bool {
        self.answered_once
    }

    /// How the close ended, once the member is closed or stopped (`None` while it runs): the
    /// outcome the driver's `close()` returns ([`CloseOutcome`](crate::machine::events::CloseOutcome)).
    pub fn close_outcome(&self) -> Option<crate::machine::events::CloseOutcome> {
        self.shell.close_outcome(self.phase.stopped())
    }

    /// The terminal error, once stopped on one.
    pub fn fatal_error(&self) -> Option<&GroupError> {
        match &self.phase {
            Phase::Fatal(e) => Some(e),
            _ => None,
        }
    }

    fn is_static(&self) -> bool {
        self.shell.config.instance_id.is_some()
    }

    fn in_group(&self) -> bool {
        matches!(
            self.phase,
            Phase::Joining
                | Phase::Reconciling
                | Phase::AwaitRevoke { .. }
                | Phase::Acknowledging
                | Phase::Stable
        )
    }

    fn stopped(&self) -> bool {
        self.phase.stopped()
    }

    fn closing(&self) -> bool {
        self.stopped() || self.shell.close_requested
    }

    // ------------------------------------------------------------------ commands

    /// Joins the group with the topology (epoch 0). Errors with [`ApiMisuse::Stopped`] once
    /// [`close`](Self::close) was called or the member stopped.
    pub fn join(&mut self, now: Instant) -> Result<(), ApiMisuse> {
        self.input(now);
        if self.closing() {
            return Err(ApiMisuse::Stopped);
        }
        self.subscribed = true;
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
        self.leave_command(CloseOptions::Default, now);
    }

    /// Leaves the group for good with epoch -1, static member or not (the broker forgets the
    /// instance id and reassigns the tasks at once). Does nothing once `close` was called.
    pub fn leave_group(&mut self, now: Instant) {
        self.leave_command(CloseOptions::LeaveGroup, now);
    }

    fn leave_command(&mut self, options: CloseOptions, now: Instant) {
        self.input(now);
        if self.closing() {
            return;
        }
        self.subscribed = false;
        self.shell.timers.stop(Timer::PollInterval);
        if matches!(self.phase, Phase::Stale) {
            return self.set_phase(Phase::Unsubscribed, Reason::Unsubscribed);
        }
        if !self.in_group() {
            return;
        }
        self.leave_when_revoked(options, AfterLeave::Unsubscribe, Reason::Unsubscribed);
    }

    /// Records that the application is alive; after a poll timeout, rejoins.
    pub fn poll(&mut self, now: Instant) {
        self.input(now);
        if !self.subscribed || self.closing() {
            return;
        }
        self.shell.timers.set(
            Timer::PollInterval,
            crate::machine::timer::after(now, self.shell.config.max_poll_interval),
        );
        if matches!(self.phase, Phase::Stale) {
            self.join_group(Reason::PolledAfterPollTimeout);
        }
    }

    /// Hands back the ticket of a [`StreamsEvent::TasksRevoking`]: the revoked active tasks are
    /// released and the reconciliation goes on.
    pub fn complete_revocation(
        &mut self,
        RevokeTicket { id }: RevokeTicket,
        now: Instant,
    ) -> Result<(), ApiMisuse> {
        self.input(now);
        match &self.phase {
            Phase::AwaitRevoke { ticket, revoking } if *ticket == id => {
                for t in revoking.clone() {
                    self.owned.active.remove(&t);
                    self.process.release(self.member_id.as_str(), &t);
                }
                if let Some((options, then, reason)) = self.deferred_leave.take() {
                    self.release_all(ReleaseReason::Leaving);
                    self.leave(options, then, reason);
                    return Ok(());
                }
                self.set_phase(Phase::Reconciling, Reason::RevocationCompleted);
                self.reconcile();
                Ok(())
            }
            _ => Err(ApiMisuse::UnknownTicket),
        }
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
        self.task_offsets = offsets;
        self.task_end_offsets = end_offsets;
    }

    /// Asks every member of the application to shut down (`ShutdownApplication` on every
    /// heartbeat from now on; the others see [`StatusCode::ShutdownApplication`](super::StatusCode::ShutdownApplication)).
    pub fn request_shutdown(&mut self, now: Instant) {
        self.input(now);
        self.shutdown_requested = true;
        if self.in_group() {
            self.shell.timers.stop(Timer::Heartbeat);
        }
    }

    /// Closes the member: tasks released, the leave heartbeat as `options` ask (default: -2
    /// static, -1 dynamic; leave-group: -1; remain-in-group: -2 static, nothing dynamic), then
    /// [`StreamsEvent::Closed`]. A close before the first answer still sends the leave.
    pub fn close(&mut self, options: CloseOptions, now: Instant) {
        self.input(now);
        if self.stopped() {
            return;
        }
        self.shell.close_requested = true;
        self.subscribed = false;
        self.shell.timers.stop(Timer::PollInterval);
        if let Phase::Leaving { then, .. } = &mut self.phase {
            *then = AfterLeave::Close;
            return;
        }
        if !self.in_group() {
            return self.finish_leave(AfterLeave::Close);
        }
        // A close takes an outstanding revocation ticket back (as the classic member's does):
        // the tasks being revoked are released with the rest.
        if let Phase::AwaitRevoke { .. } = &self.phase {
            self.deferred_leave = None;
            self.set_phase(Phase::Reconciling, Reason::Closed);
        }
        self.leave_when_revoked(options, AfterLeave::Close, Reason::Closed);
    }

    // ------------------------------------------------------------------ outputs

    /// The next request to send. Drain until `None` after every input.
    pub fn poll_request(&mut self) -> Option<Outbound> {
        if let Some(out) = self.shell.outbound.pop_front() {
            return Some(out);
        }
        let needed = !self.stopped() && !matches!(self.phase, Phase::Unsubscribed | Phase::Stale);
        if needed && let Some(out) = self.shell.lookup.poll_request() {
            return Some(out);
        }
        if self.stopped() {
            return None;
        }
        let Some(coordinator) = self.coordinator().cloned() else {
            // A leave that cannot be sent completes the leave (onHeartbeatRequestSkipped) when
            // no join went out: the broker cannot know the member.
            if let Phase::Leaving {
                request: None,
                then,
                ..
            } = self.phase
                && !self.registration.join_sent
            {
                self.finish_leave(then);
            }
            return None;
        };
        if let Phase::Leaving {
            epoch,
            request: None,
            then,
        } = self.phase
        {
            let id = self.build_leave(&coordinator, epoch);
            self.phase = Phase::Leaving {
                epoch,
                request: Some(id),
                then,
            };
            return self.shell.outbound.pop_front();
        }
        if matches!(self.phase, Phase::Leaving { .. }) {
            return None;
        }
        if self.in_group()
            && let Some(out) = session::poll(
                &mut self.shell,
                &mut self.session_read,
                &coordinator,
                session::STREAMS,
                Sent::SessionRead,
            )
        {
            return Some(out);
        }
        if self.in_group() && self.heartbeat_in_flight.is_none() {
            let now = self.shell.now;
            let urgent = matches!(self.phase, Phase::Joining | Phase::Acknowledging);
            let due = self
                .shell
                .timers
                .get(Timer::Heartbeat)
                .is_none_or(|at| at <= now);
            let backoff_over = self
                .shell
                .timers
                .get(Timer::Rejoin)
                .is_none_or(|at| at <= now);
            if urgent && backoff_over || due {
                return Some(self.build_heartbeat(&coordinator));
            }
        }
        None
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<StreamsEvent> {
        while let Some(error) = self.shell.lookup_failure() {
            self.fail(error);
        }
        self.flush();
        self.events.pop_front()
    }

    /// The earliest deadline and its timer; due at once when another local member waits for a
    /// task this member must give up.
    pub fn poll_timeout(&self) -> Option<(Instant, Timer)> {
        if self.in_group() && self.process.must_yield(self.member_id.as_str()) {
            return Some((self.shell.now, Timer::TaskGuard));
        }
        self.shell.poll_timeout(|t| match t {
            Timer::Heartbeat | Timer::Rejoin => {
                self.in_group() && self.heartbeat_in_flight.is_none()
            }
            Timer::TaskGuard => self.in_group(),
            _ => true,
        })
    }

    // ------------------------------------------------------------------ inputs

    /// Advances the clock and fires due timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.shell.tick(now);
        self.check_lease();
        self.guard_step();
        if self.shell.expired(Timer::TaskGuard) {
            self.reconcile();
        }
        if self.shell.expired(Timer::PollInterval) && self.in_group() {
            tracing::warn!(group = %self.shell.config.group_id, "application did not poll within max.poll.interval.ms; leaving the group");
            self.lose_all(Reason::PollTimeout);
            let (options, then) = match self.deferred_leave.take() {
                Some((options, then, _)) => (options, then),
                None => (CloseOptions::Default, AfterLeave::Stale),
            };
            self.leave(options, then, Reason::PollTimeout);
        }
    }

    /// Feeds the outcome of a request this member emitted.
    pub fn handle_response(&mut self, id: RequestId, result: Reply, now: Instant) {
        let Some((sent, result)) = self.shell.route(id, result, now) else {
            self.check_lease();
            self.guard_step();
            return;
        };
        // A lease that ran out while the answer was on its way is lost first: the answer was
        // sent before it ran out and cannot vouch for the membership now.
        self.check_lease();
        match sent {
            Sent::Heartbeat {
                epoch,
                incarnation,
                owned,
            } => {
                if owned.is_some() && result.is_err() {
                    self.owned_report_unsettled = true;
                }
                self.on_heartbeat(id, epoch, incarnation, owned, result);
            }
            Sent::Leave => self.on_leave(id, result),
            Sent::SessionRead(step) => session::apply(
                &mut self.shell,
                &mut self.session_read,
                step,
                &result,
                session::STREAMS,
                self.interval,
            ),
        }
        self.guard_step();
    }

    /// Every input: the clock, and the guard's demands.
    fn input(&mut self, now: Instant) {
        self.shell.advance(now);
        self.check_lease();
        self.guard_step();
    }

    // ------------------------------------------------------------------ events

    /// Moves the shell's events (state changes) into the member's queue, in order.
    fn flush(&mut self) {
        while let Some(e) = self.shell.events.pop_front() {
            let e = match e {
                Event::StateChanged {
                    from,
                    to,
                    reason,
                    member_id,
                    generation,
                } => StreamsEvent::StateChanged {
                    from,
                    to,
                    reason,
                    member_id,
                    epoch: generation,
                },
                Event::Fatal(e) => StreamsEvent::Fatal(e),
                Event::Closed => StreamsEvent::Closed,
                Event::ConnectionTrouble { broker, error } => {
                    StreamsEvent::ConnectionTrouble { broker, error }
                }
                Event::NotJoined { error } => StreamsEvent::NotJoined { error },
                other => {
                    tracing::debug!(event = ?other, "streams member: no streams form of this event");
                    continue;
                }
            };
            self.events.push_back(e);
        }
    }

    fn emit(&mut self, e: StreamsEvent) {
        self.flush();
        self.events.push_back(e);
    }

    fn set_phase(&mut self, next: Phase, reason: Reason) {
        self.shell
            .set_phase(&mut self.phase, next, reason, &self.member_id, self.epoch);
    }

    // ------------------------------------------------------------------ the guard

    /// Gives up, at once and without a ticket, the standby and warm-up tasks another local
    /// member was assigned as active (the guard's liveness rule), and reports them released.
    fn guard_step(&mut self) {
        if !self.in_group() {
            return;
        }
        let gave_up = self.process.yield_to_active(self.member_id.as_str());
        if gave_up.is_empty() {
            return;
        }
        let mut released = StreamsTasks::default();
        for g in &gave_up {
            self.owned.standby.remove(&g.task);
            self.owned.warmup.remove(&g.task);
            released.of_mut(g.role).insert(g.task.clone());
        }
        for g in gave_up {
            self.emit(StreamsEvent::GuardIntervened(g));
        }
        self.emit(StreamsEvent::TasksReleased {
            tasks: released,
            owned: self.owned.clone(),
            reason: ReleaseReason::GivenUpToActive,
        });
        // The next heartbeat reports it, now; what the target still names is withheld from now
        // on (the active assignment reserves it).
        self.shell.timers.stop(Timer::Heartbeat);
        self.reconcile();
    }

    // ------------------------------------------------------------------ reconciliation

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
        let Some(target) = self.target.clone() else {
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
                .owned
                .of(role)
                .iter()
                .filter(|t| target.role_of(t).is_none())
                .cloned()
                .collect();
            for t in gone {
                self.owned.of_mut(role).remove(&t);
                self.process.release(&me, &t);
                released.of_mut(role).insert(t);
            }
        }
        if !released.is_empty() {
            self.emit(StreamsEvent::TasksReleased {
                tasks: released,
                owned: self.owned.clone(),
                reason: ReleaseReason::Unassigned,
            });
        }
        // Active tasks the target takes away (or demotes): revoked with a ticket first.
        let revoked: BTreeSet<TaskId> = self
            .owned
            .active
            .iter()
            .filter(|t| !target.active.contains(*t))
            .cloned()
            .collect();
        self.process
            .retain_claims(&me, |t, r| target.role_of(t) == Some(r));
        if !revoked.is_empty() {
            self.withheld.clear();
            let ticket = self.shell.next_ticket();
            self.emit(StreamsEvent::TasksRevoking {
                active: revoked.iter().cloned().collect(),
                ticket: RevokeTicket { id: ticket },
            });
            return self.set_phase(
                Phase::AwaitRevoke {
                    ticket,
                    revoking: revoked,
                },
                Reason::Revoking,
            );
        }
        let wanted: Vec<(TaskId, TaskRole)> = target
            .iter()
            .filter(|(t, r)| self.owned.role_of(t) != Some(*r))
            .map(|(t, r)| (t.clone(), r))
            .collect();
        if !wanted.is_empty() && (self.owned_report_in_flight() || self.owned_report_unsettled) {
            // A heartbeat on its way lists what this member owned when it went out; the broker
            // would read it as the current ownership (CurrentAssignmentBuilder.hasNotReleased).
            // Take the tasks once it is answered (as the consumer member).
            return self.set_phase(Phase::Reconciling, Reason::AwaitingHeartbeat);
        }
        let mut added = StreamsTasks::default();
        let mut withheld = BTreeMap::new();
        for (t, role) in wanted {
            match self.process.acquire(&me, &t, role) {
                Acquire::Granted => {
                    for r in ROLES {
                        self.owned.of_mut(r).remove(&t);
                    }
                    self.owned.of_mut(role).insert(t.clone());
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
        self.withheld = withheld;
        if !added.is_empty() || matches!(self.phase, Phase::Joining) {
            self.emit(StreamsEvent::TasksAssigned {
                added,
                owned: self.owned.clone(),
                epoch: self.epoch,
            });
        }
        if self.withheld.is_empty() {
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
        let acked = self.acked_owned.as_ref() == Some(&self.owned);
        if !acked {
            self.set_phase(Phase::Acknowledging, Reason::AcknowledgingAssignment);
        } else if self.withheld.is_empty() {
            self.set_phase(Phase::Stable, Reason::AssignmentReconciled);
        } else {
            self.set_phase(Phase::Reconciling, Reason::TaskWithheld);
        }
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
    /// (CurrentAssignmentBuilder.hasNotReleased), so taking them away again completes at once.
    fn refuse(&mut self, refused: RefusedTasks) {
        if refused == self.refused {
            return;
        }
        if !refused.is_empty() {
            let stale = self
                .statuses
                .iter()
                .any(|s| s.code == StatusCode::StaleTopology);
            tracing::warn!(
                group = %self.shell.config.group_id,
                member_id = %self.member_id,
                unknown_subtopologies = ?refused.subtopologies(),
                refused = ?refused,
                topology_epoch = self.streams.topology.epoch,
                stale_topology = stale,
                "the coordinator assigned tasks of subtopologies this member's topology does not have (the group runs another topology); not taking them"
            );
        }
        self.refused = refused.clone();
        self.emit(StreamsEvent::TasksRefused { refused });
    }

    /// Whether the regular heartbeat in flight listed the owned tasks.
    fn owned_report_in_flight(&self) -> bool {
        self.heartbeat_in_flight
            .and_then(|id| self.shell.in_flight(id))
            .is_some_and(|s| matches!(s, Sent::Heartbeat { owned: Some(_), .. }))
    }

    /// Releases, without a ticket, everything the application holds (close, unsubscribe).
    fn release_all(&mut self, reason: ReleaseReason) {
        let tasks = std::mem::take(&mut self.owned);
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
        let tasks = std::mem::take(&mut self.owned);
        self.forget_in_guard();
        if !tasks.is_empty() {
            self.emit(StreamsEvent::TasksLost { tasks, reason });
        }
    }

    fn forget_in_guard(&mut self) {
        self.withheld.clear();
        self.shell.timers.stop(Timer::TaskGuard);
        self.process.forget(self.member_id.as_str());
    }

    // ------------------------------------------------------------------ transitions

    fn join_group(&mut self, reason: Reason) {
        self.shell.end_lease();
        self.epoch = 0;
        self.last_sent = None;
        self.acked_owned = None;
        self.target = None;
        self.shell.timers.stop(Timer::Heartbeat);
        self.set_phase(Phase::Joining, reason);
    }

    /// Releases what the application owns and leaves; while a revocation ticket is out the
    /// leave waits for it (bounded by `max.poll.interval.ms`), so the revoked tasks are not
    /// handed to another member before the application finished with them.
    fn leave_when_revoked(&mut self, options: CloseOptions, then: AfterLeave, reason: Reason) {
        if let Phase::AwaitRevoke { revoking, .. } = &self.phase {
            let revoking = revoking.clone();
            let mut released = self.owned.clone();
            released.active.retain(|t| !revoking.contains(t));
            let me = self.member_id.to_string();
            for (t, _) in released.iter() {
                self.process.release(&me, t);
            }
            self.owned.standby.clear();
            self.owned.warmup.clear();
            self.owned.active.retain(|t| revoking.contains(t));
            if !released.is_empty() {
                self.emit(StreamsEvent::TasksReleased {
                    tasks: released,
                    owned: self.owned.clone(),
                    reason: ReleaseReason::Leaving,
                });
            }
            self.deferred_leave = Some((options, then, reason));
            self.shell.timers.set(
                Timer::PollInterval,
                crate::machine::timer::after(self.shell.now, self.shell.config.max_poll_interval),
            );
            return;
        }
        self.release_all(ReleaseReason::Leaving);
        self.leave(options, then, reason);
    }

    /// Runs [`on_lease_expired`](Self::on_lease_expired) when the lease ran out by now; every
    /// input checks this first.
    fn check_lease(&mut self) {
        if self.shell.lease_ran_out() {
            self.on_lease_expired();
        }
    }

    /// The lease ran out: the coordinator may have expired the member after the group's session
    /// timeout (`streams.session.timeout.ms`) and given its tasks to others, so they are lost
    /// now, as when fenced. The member keeps its member id, looks the coordinator up again and
    /// rejoins at epoch 0; answers to heartbeats sent before are ignored.
    fn on_lease_expired(&mut self) {
        if self.epoch <= 0 || !self.in_group() {
            return;
        }
        self.incarnation += 1;
        self.shell.lookup.rediscover(&self.shell.config.group_id);
        self.fenced(Reason::LeaseExpired);
    }

    /// Fenced (FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID): tasks lost, rejoin at epoch 0 with the
    /// same member id (StreamsMembershipManager.onFenced).
    fn fenced(&mut self, reason: Reason) {
        if let Phase::Leaving { then, .. } = self.phase {
            return self.finish_leave(then);
        }
        if let Some((_, then, _)) = self.deferred_leave.take() {
            self.lose_all(reason);
            return self.finish_leave(then);
        }
        self.lose_all(reason);
        self.registration.may_be_registered = true;
        self.join_group(reason);
    }

    /// Decides the leave epoch (StreamsMembershipManager.leaveGroupEpoch; a dynamic member
    /// remaining in the group sends nothing) and starts leaving.
    fn leave(&mut self, options: CloseOptions, then: AfterLeave, reason: Reason) {
        let epoch = match options {
            CloseOptions::LeaveGroup => Some(LEAVE_EPOCH),
            _ if self.is_static() => Some(STATIC_LEAVE_EPOCH),
            CloseOptions::RemainInGroup => None,
            _ => Some(LEAVE_EPOCH),
        };
        let known = self.registration.join_sent || self.epoch > 0;
        match epoch {
            Some(epoch) if known => self.set_phase(
                Phase::Leaving {
                    epoch,
                    request: None,
                    then,
                },
                reason,
            ),
            _ => self.finish_leave(then),
        }
    }

    fn finish_leave(&mut self, then: AfterLeave) {
        if self.registration.join_sent || self.epoch > 0 {
            self.registration.may_be_registered = true;
        }
        self.epoch = 0;
        self.last_sent = None;
        self.acked_owned = None;
        self.target = None;
        self.registration.join_sent = false;
        self.incarnation += 1;
        match then {
            AfterLeave::Close => {
                self.forget_in_guard();
                self.set_phase(Phase::Closed, Reason::Left);
                self.emit(StreamsEvent::Closed);
            }
            AfterLeave::Unsubscribe if self.subscribed => self.join_group(Reason::Resubscribed),
            AfterLeave::Unsubscribe => self.set_phase(Phase::Unsubscribed, Reason::Left),
            AfterLeave::Stale => self.set_phase(Phase::Stale, Reason::LeftOnPollTimeout),
            AfterLeave::Rejoin => self.join_group(Reason::RejoinAfterInstanceRelease),
        }
    }

    /// Stops on `error`: tasks lost, the fatal phase, [`StreamsEvent::Fatal`].
    fn fail(&mut self, error: GroupError) {
        if self.stopped() {
            return;
        }
        self.lose_all(Reason::FatalError);
        tracing::error!(group = %self.shell.config.group_id, %error, "streams member stopped");
        self.set_phase(Phase::Fatal(error.clone()), Reason::FatalError);
        self.emit(StreamsEvent::Fatal(error));
    }

    // ------------------------------------------------------------------ requests

    fn base_heartbeat(&self, epoch: i32) -> StreamsGroupHeartbeatRequest {
        StreamsGroupHeartbeatRequest::default()
            .with_group_id(self.shell.group_id())
            .with_member_id(str_bytes(self.member_id.as_str()))
            .with_member_epoch(epoch)
            .with_endpoint_information_epoch(self.endpoint_epoch)
            // The Java client sends the instance id on every heartbeat.
            .with_instance_id(self.shell.config.instance_id.as_deref().map(str_bytes))
            .with_rebalance_timeout_ms(-1)
    }

    fn send(
        &mut self,
        coordinator: &Broker,
        body: StreamsGroupHeartbeatRequest,
        sent: Sent,
    ) -> RequestId {
        let request = Request::StreamsGroupHeartbeat {
            body: Box::new(body),
            versions: HEARTBEAT_VERSIONS,
        };
        self.shell
            .send(Target::Coordinator(coordinator.clone()), request, sent)
    }

    /// An epoch-0 join carries everything; later heartbeats the owned tasks only when they
    /// changed since last sent, and task offsets when due and changed
    /// (StreamsGroupHeartbeatRequestManager.HeartbeatState.buildRequestData). After any failure
    /// the member forgets what it sent: the next heartbeat lists everything again.
    fn build_heartbeat(&mut self, coordinator: &Broker) -> Outbound {
        let now = self.shell.now;
        let joining = self.epoch == 0;
        let mut r = self.base_heartbeat(self.epoch);
        let mut last = if joining {
            LastSent::default()
        } else {
            self.last_sent.clone().unwrap_or_default()
        };
        if joining {
            let process_id = self.process.process_id();
            r.topology = Some(self.streams.topology.to_wire());
            r.rebalance_timeout_ms = millis(self.shell.config.max_poll_interval);
            r.process_id = Some(str_bytes(&process_id));
            r.user_endpoint = self.process.endpoint().map(|e| {
                req::Endpoint::default()
                    .with_host(str_bytes(&e.host))
                    .with_port(e.port)
            });
            r.rack_id = self.shell.config.rack_id.as_deref().map(str_bytes);
            r.client_tags = Some(
                self.streams
                    .client_tags
                    .iter()
                    .map(|(k, v)| {
                        req::KeyValue::default()
                            .with_key(str_bytes(k))
                            .with_value(str_bytes(v))
                    })
                    .collect(),
            );
            self.registration.join_sent = true;
        }
        let list_owned = joining || last.owned.as_ref() != Some(&self.owned);
        if list_owned {
            r.active_tasks = Some(tasks_to_wire(&self.owned.active));
            r.standby_tasks = Some(tasks_to_wire(&self.owned.standby));
            r.warmup_tasks = Some(tasks_to_wire(&self.owned.warmup));
            last.owned = Some(self.owned.clone());
        }
        let due = joining
            || list_owned
            || self.offsets_sent_at.is_none_or(|at| {
                now >= crate::machine::timer::after(at, self.task_offset_interval)
            })
            || self.hot_warmup();
        if due {
            if joining || last.offsets.as_ref() != Some(&self.task_offsets) {
                r.task_offsets = Some(offsets_to_wire(&self.task_offsets));
                last.offsets = Some(self.task_offsets.clone());
                self.offsets_sent_at = Some(now);
            }
            if joining || last.end_offsets.as_ref() != Some(&self.task_end_offsets) {
                r.task_end_offsets = Some(offsets_to_wire(&self.task_end_offsets));
                last.end_offsets = Some(self.task_end_offsets.clone());
                self.offsets_sent_at = Some(now);
            }
        }
        r.shutdown_application = self.shutdown_requested;
        self.last_sent = Some(last);
        let sent = Sent::Heartbeat {
            epoch: self.epoch,
            incarnation: self.incarnation,
            owned: list_owned.then(|| self.owned.clone()),
        };
        let id = self.send(coordinator, r, sent);
        self.heartbeat_in_flight = Some(id);
        self.shell.outbound.pop_front().expect("just pushed")
    }

    /// A warm-up task whose offset is within the acceptable recovery lag of its end offset:
    /// the broker should hear at once (hasAtLeastOneHotWarmupTask).
    fn hot_warmup(&self) -> bool {
        self.owned.warmup.iter().any(|t| {
            match (self.task_offsets.get(t), self.task_end_offsets.get(t)) {
                (Some(&o), Some(&e)) if o != i64::MAX && e != i64::MAX => {
                    self.acceptable_recovery_lag >= 0 && e - o <= self.acceptable_recovery_lag
                }
                _ => false,
            }
        })
    }

    fn build_leave(&mut self, coordinator: &Broker, epoch: i32) -> RequestId {
        let r = self.base_heartbeat(epoch);
        self.send(coordinator, r, Sent::Leave)
    }

    // ------------------------------------------------------------------ answers

    fn backoff_heartbeat(&mut self) {
        let delay = self.shell.backoff(&mut self.heartbeat_failures);
        let at = crate::machine::timer::after(self.shell.now, delay);
        self.shell.timers.set(Timer::Heartbeat, at);
        self.shell.timers.set(Timer::Rejoin, at);
    }

    fn on_heartbeat(
        &mut self,
        id: RequestId,
        sent_epoch: i32,
        incarnation: u64,
        owned: Option<StreamsTasks>,
        result: Result<Response, TransportError>,
    ) {
        self.on_heartbeat_answer(id, sent_epoch, incarnation, owned, result);
        // Tasks held back while this heartbeat was in flight are taken now.
        if matches!(self.phase, Phase::Reconciling)
            && self.target.is_some()
            && self.heartbeat_in_flight.is_none()
        {
            self.reconcile();
        }
    }

    fn on_heartbeat_answer(
        &mut self,
        id: RequestId,
        sent_epoch: i32,
        incarnation: u64,
        owned: Option<StreamsTasks>,
        result: Result<Response, TransportError>,
    ) {
        if self.heartbeat_in_flight == Some(id) {
            self.heartbeat_in_flight = None;
        }
        if incarnation != self.incarnation || !self.in_group() {
            // An answer for a membership the member left, or after it stopped.
            return;
        }
        let r: StreamsGroupHeartbeatResponse = match result {
            Ok(Response {
                body: ResponseBody::StreamsGroupHeartbeat(r),
                version,
            }) => {
                let mut r = r;
                if version < 1 {
                    // v0 carries the lag in the legacy int32 field only.
                    r.acceptable_recovery_lag = i64::from(r.acceptable_recovery_lag_legacy);
                }
                r
            }
            Ok(_) => {
                return self.fail(invalid(
                    "the answer is not a StreamsGroupHeartbeat response",
                ));
            }
            Err(TransportError::UnsupportedApi { .. }) => {
                return self.fail(GroupError::StreamsProtocolUnsupported);
            }
            Err(e) => {
                tracing::debug!(error = %e, "streams heartbeat failed in the transport");
                if sent_epoch == 0 {
                    self.registration.may_be_registered = true;
                }
                self.last_sent = None;
                self.shell.coordinator_failed();
                return self.backoff_heartbeat();
            }
        };
        if r.error_code != codes::NONE {
            // Every failed attempt makes the next heartbeat full (HeartbeatState.reset).
            self.last_sent = None;
            self.offsets_sent_at = None;
        }
        if sent_epoch == 0
            && matches!(
                r.error_code,
                codes::COORDINATOR_NOT_AVAILABLE | codes::NOT_COORDINATOR
            )
        {
            self.registration.may_be_registered = true;
        }
        let group = self.shell.config.group_id.clone();
        let message = r.error_message.as_ref().map(|m| m.to_string());
        let topology = |code| match code {
            codes::STREAMS_INVALID_TOPOLOGY => Some(GroupError::StreamsInvalidTopology {
                group: group.clone(),
                message: message.clone(),
            }),
            codes::STREAMS_INVALID_TOPOLOGY_EPOCH => {
                Some(GroupError::StreamsInvalidTopologyEpoch {
                    group: group.clone(),
                    message: message.clone(),
                })
            }
            codes::STREAMS_TOPOLOGY_FENCED => Some(GroupError::StreamsTopologyFenced {
                group: group.clone(),
                message: message.clone(),
            }),
            codes::UNSUPPORTED_VERSION => Some(GroupError::StreamsProtocolUnsupported),
            _ => None,
        };
        if let Some(e) = topology(r.error_code) {
            return self.fail(e);
        }
        match classify(API, r.error_code, &group) {
            ErrorAction::Proceed => self.heartbeat_ok(sent_epoch, owned, r),
            ErrorAction::FencedMember => {
                tracing::info!(%group, code = r.error_code, "fenced; rejoining with the same member id");
                self.fenced(if r.error_code == codes::FENCED_MEMBER_EPOCH {
                    Reason::FencedMemberEpoch
                } else {
                    Reason::UnknownMemberId
                });
                if sent_epoch == 0 && matches!(self.phase, Phase::Joining) {
                    // The join itself was fenced: pace the rejoins.
                    self.backoff_heartbeat();
                }
            }
            ErrorAction::UnreleasedInstance => self.unreleased(sent_epoch),
            ErrorAction::Fenced => {
                let instance_id = self.shell.config.instance_id.clone().unwrap_or_default();
                self.fail(GroupError::FencedInstanceId { group, instance_id });
            }
            ErrorAction::UnsupportedProtocol => self.fail(GroupError::StreamsProtocolUnsupported),
            ErrorAction::Rediscover => {
                self.shell.coordinator_failed();
                self.heartbeat_failures = 0;
                self.shell.timers.stop(Timer::Heartbeat);
                self.shell.timers.stop(Timer::Rejoin);
            }
            ErrorAction::Report => {
                tracing::warn!(%group, code = r.error_code, message = ?r.error_message, "streams heartbeat error reported, member carries on");
                self.backoff_heartbeat();
            }
            ErrorAction::Fatal(e) => self.fail(e),
            _ => self.backoff_heartbeat(),
        }
    }

    /// UNRELEASED_INSTANCE_ID answering a static member's epoch-0 join: as the consumer member,
    /// leave with -2 under the own id and rejoin, a bounded number of times (the Java streams
    /// client stops at once).
    fn unreleased(&mut self, sent_epoch: i32) {
        let Some(instance_id) = self.shell.config.instance_id.clone() else {
            return self.fail(GroupError::Fatal {
                api: API,
                code: codes::UNRELEASED_INSTANCE_ID,
            });
        };
        if sent_epoch == 0
            && self.registration.may_be_registered
            && self.registration.unreleased_recoveries < UNRELEASED_RECOVERIES
        {
            self.registration.unreleased_recoveries += 1;
            tracing::warn!(group = %self.shell.config.group_id, %instance_id, attempt = self.registration.unreleased_recoveries, "UNRELEASED_INSTANCE_ID after this member's own join may have landed; leaving with -2 and rejoining");
            self.lose_all(Reason::UnreleasedInstanceId);
            if let Some((options, then, reason)) = self.deferred_leave.take() {
                return self.leave(options, then, reason);
            }
            self.set_phase(
                Phase::Leaving {
                    epoch: STATIC_LEAVE_EPOCH,
                    request: None,
                    then: AfterLeave::Rejoin,
                },
                Reason::UnreleasedInstanceIdRecovery,
            );
        } else {
            self.fail(GroupError::UnreleasedInstanceId {
                group: self.shell.config.group_id.clone(),
                instance_id,
            });
        }
    }

    fn heartbeat_ok(
        &mut self,
        sent_epoch: i32,
        owned: Option<StreamsTasks>,
        r: StreamsGroupHeartbeatResponse,
    ) {
        self.owned_report_unsettled = false;
        self.interval = Duration::from_millis(r.heartbeat_interval_ms.max(0) as u64);
        self.shell.timers.set(
            Timer::Heartbeat,
            crate::machine::timer::after(self.shell.now, self.interval),
        );
        if r.member_epoch < 0 {
            return;
        }
        if !r.member_id.is_empty() && r.member_id.as_str() != self.member_id.as_str() {
            return self.fail(invalid(&format!(
                "the coordinator answered for member {:?}, not {}",
                r.member_id.as_str(),
                self.member_id
            )));
        }
        // Tasks: all three lists or none (StreamsMembershipManager.onHeartbeatSuccess), split
        // into the tasks this member can run and those of subtopologies its topology lacks,
        // which it refuses (see `refuse`).
        let target = match (&r.active_tasks, &r.standby_tasks, &r.warmup_tasks) {
            (Some(a), Some(s), Some(w)) => {
                let (tasks, refused) = tasks_from_wire([a, s, w], &self.streams.topology);
                Some((tasks.normalized(), refused))
            }
            (None, None, None) => None,
            _ => {
                return self.fail(invalid(
                    "active, standby and warm-up tasks must be all null or all non-null",
                ));
            }
        };
        self.answered_once = true;
        self.heartbeat_failures = 0;
        self.shell.timers.stop(Timer::Rejoin);
        if r.member_epoch > 0 {
            // The coordinator restarted the member's session when it read this heartbeat.
            let bound = epoch_lease_bound(&self.shell.config, self.interval);
            self.shell.confirm_membership(bound);
            self.registration.may_be_registered = true;
            self.registration.unreleased_recoveries = 0;
        }
        self.epoch = r.member_epoch;
        if let Some(owned) = owned {
            self.acked_owned = Some(owned);
        } else if sent_epoch == 0 {
            self.acked_owned = Some(StreamsTasks::default());
        }
        self.task_offset_interval = Duration::from_millis(r.task_offset_interval_ms.max(0) as u64);
        self.acceptable_recovery_lag = r.acceptable_recovery_lag;
        if let Some(statuses) = &r.status {
            let statuses = statuses_from_wire(statuses);
            if statuses != self.statuses {
                self.statuses = statuses.clone();
                self.emit(StreamsEvent::StatusChanged { statuses });
            }
        }
        let epoch_changed = r.endpoint_information_epoch != self.endpoint_epoch;
        self.endpoint_epoch = r.endpoint_information_epoch;
        if let Some(entries) = &r.partitions_by_user_endpoint {
            let endpoints = endpoints_from_wire(entries);
            if epoch_changed || endpoints != self.endpoints {
                self.endpoints = endpoints.clone();
                self.emit(StreamsEvent::EndpointsChanged {
                    epoch: self.endpoint_epoch,
                    endpoints,
                });
            }
        }
        if let Some((t, refused)) = target {
            self.refuse(refused);
            // Waits for tasks the new target no longer names end now, also while a revocation
            // defers the reconciliation: they must not keep another local member's task
            // reserved.
            self.process
                .retain_claims(self.member_id.as_str(), |task, r| {
                    t.role_of(task) == Some(r)
                });
            self.withheld.retain(|task, r| t.role_of(task) == Some(*r));
            self.target = Some(t);
        }
        if matches!(
            self.phase,
            Phase::Joining | Phase::Acknowledging | Phase::Stable | Phase::Reconciling
        ) {
            self.reconcile();
        }
    }

    fn on_leave(&mut self, id: RequestId, result: Result<Response, TransportError>) {
        let Phase::Leaving {
            request: Some(r),
            then,
            ..
        } = self.phase
        else {
            return;
        };
        if r != id {
            return;
        }
        let code = match &result {
            Ok(Response {
                body: ResponseBody::StreamsGroupHeartbeat(r),
                ..
            }) => r.error_code,
            _ => 0,
        };
        if code != codes::NONE {
            tracing::info!(code, "leave heartbeat answered with an error");
        }
        self.shell.leave_answered(&result, code);
        // As the consumer member: a -2 leave of the recovery answered FENCED_INSTANCE_ID means
        // another member id holds the instance id: stop.
        if then == AfterLeave::Rejoin
            && code == codes::FENCED_INSTANCE_ID
            && let Some(instance_id) = self.shell.config.instance_id.clone()
        {
            return self.fail(GroupError::UnreleasedInstanceId {
                group: self.shell.config.group_id.clone(),
                instance_id,
            });
        }
        let failed = result.is_err()
            || matches!(
                code,
                codes::COORDINATOR_NOT_AVAILABLE
                    | codes::NOT_COORDINATOR
                    | codes::COORDINATOR_LOAD_IN_PROGRESS
            );
        if then == AfterLeave::Rejoin && (failed || code == codes::NONE) {
            // An accepted -2 leave proves the instance id was this member's own; a failed one
            // may not have released anything: neither counts against the bound.
            self.registration.unreleased_recoveries =
                self.registration.unreleased_recoveries.saturating_sub(1);
            if result.is_err()
                || matches!(
                    code,
                    codes::COORDINATOR_NOT_AVAILABLE | codes::NOT_COORDINATOR
                )
            {
                self.shell.coordinator_failed();
            }
        }
        self.finish_leave(then);
    }
}

fn invalid(reason: &str) -> GroupError {
    GroupError::InvalidResponse {
        api: API,
        reason: reason.to_owned(),
    }
}
