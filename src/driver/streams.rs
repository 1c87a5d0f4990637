//! The tokio face of the KIP-1071 streams member ([`StreamsMember`]): [`StreamsGroupMember`],
//! its [`StreamsMemberHandle`] and its [`StreamsSnapshot`], on the same member loop, command
//! channel and event stream as [`GroupMember`](super::GroupMember).

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::sync::oneshot;

use super::{
    CloseOutcome, Commands, EventStream, MemberTask, OffsetCalls, draw_identity, now, start,
};
use crate::config::GroupConfig;
use crate::error::{ApiMisuse, ConfigError};
use crate::machine::TopicPartition;
use crate::machine::events::{
    CloseOptions, CommitError, CommitOffset, MemberState, Reason, RevokeTicket,
};
use crate::machine::offsets::Offsets;
use crate::machine::streams::{
    InterventionKind, StreamsConfig, StreamsEvent, StreamsMember, StreamsProcess, StreamsTasks,
    TaskId, TaskRole,
};
use crate::request::Outbound;
use crate::transport::Transport;

enum StreamsCommand {
    Poll(oneshot::Sender<Result<(), ApiMisuse>>),
    CompleteRevocation(RevokeTicket, oneshot::Sender<Result<(), ApiMisuse>>),
    TaskOffsets(
        BTreeMap<TaskId, i64>,
        BTreeMap<TaskId, i64>,
        oneshot::Sender<Result<(), ApiMisuse>>,
    ),
    Commit(Vec<CommitOffset>, oneshot::Sender<Result<(), CommitError>>),
    Fetch(
        Vec<TopicPartition>,
        oneshot::Sender<Result<Offsets, CommitError>>,
    ),
    LeaveGroup(oneshot::Sender<Result<(), ApiMisuse>>),
    RequestShutdown(oneshot::Sender<Result<(), ApiMisuse>>),
    Snapshot(oneshot::Sender<StreamsSnapshot>),
}

/// A point-in-time view of a streams member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamsSnapshot {
    /// The member id (KIP-1082: drawn once, the same for the member's whole life).
    pub member_id: String,
    /// The member epoch (0 before the first answer and after fencing).
    pub epoch: i32,
    /// Where the member stands.
    pub state: MemberState,
    /// The tasks the member holds (handed to the application), by role.
    pub tasks: StreamsTasks,
    /// Tasks the coordinator assigned that the process's task guard withholds (another member
    /// of the process still holds them), with the role assigned.
    pub withheld: BTreeMap<TaskId, TaskRole>,
    /// The coordinator's node id, when known.
    pub coordinator: Option<i32>,
    /// The process id the member joined with.
    pub process_id: String,
}

/// A KIP-1071 streams-group member running on tokio: the async face of [`StreamsMember`].
///
/// [`start`](Self::start) spawns the member's task, which joins at once with the topology of
/// its [`StreamsConfig`] and the process id of its [`StreamsProcess`]. Give every member of one
/// OS process clones of the same `StreamsProcess`: its task guard keeps two of them from holding
/// one task at once, whatever the coordinator assigns (KAFKA-21401). Each time the guard steps
/// in the member logs a `warn` line naming the task, both roles and both members, bumps the
/// counter [`TASK_GUARD_INTERVENTIONS_TOTAL`](crate::metrics::TASK_GUARD_INTERVENTIONS_TOTAL)
/// and emits [`StreamsEvent::GuardIntervened`].
///
/// The member has the calls of its [`StreamsMemberHandle`] itself; [`handle`](Self::handle)
/// gives a clonable one for other tasks. Events come from [`next_event`](Self::next_event) or,
/// as a [`Stream`](futures_core::Stream), from the member itself; waiting for the next event
/// counts as the application polling (`max.poll.interval.ms`). The task ends after
/// [`StreamsEvent::Closed`], after [`StreamsEvent::Fatal`], or when the member and every handle
/// are dropped (it then closes with [`CloseOptions::Default`]); events still arrive after
/// [`close`](StreamsMemberHandle::close): drain them until `None`.
///
/// As with [`GroupMember`](super::GroupMember), give each member a transport of its own.
///
/// ```no_run
/// # async fn demo() -> Result<(), consumer_membership::Error> {
/// use std::sync::Arc;
/// use consumer_membership::{ClientConfig, CloseOptions, GroupConfig, TcpTransport};
/// use consumer_membership::streams::{
///     InternalTopic, StreamsConfig, StreamsEvent, StreamsGroupMember, StreamsProcess,
///     StreamsTopology, Subtopology,
/// };
///
/// let topology = StreamsTopology::new(
///     0,
///     vec![Subtopology::new("0", ["clicks".to_string()])
///         .with_changelog(InternalTopic::new("app-counts-changelog"))],
/// );
/// // One process object for every streams member of this OS process.
/// let process = StreamsProcess::new(uuid_of_this_process(), None);
/// let transport = Arc::new(TcpTransport::new(ClientConfig::new("127.0.0.1:9092")?));
/// let group = GroupConfig::new("app").with_instance_id("app-1");
/// let mut member =
///     StreamsGroupMember::start(transport, group, StreamsConfig::new(topology), process)?;
/// while let Some(event) = member.next_event().await {
///     match event {
///         StreamsEvent::TasksAssigned { added, .. } => println!("now running {added:?}"),
///         StreamsEvent::TasksRevoking { active, ticket } => {
///             // Commit and stop `active`, then hand the ticket back.
///             member.complete_revocation(ticket).await?;
///         }
///         StreamsEvent::Fatal(e) => return Err(e.into()),
///         _ => {}
///     }
/// #   break;
/// }
/// println!("closed: {:?}", member.close(CloseOptions::Default).await);
/// # Ok(()) }
/// # fn uuid_of_this_process() -> String { String::new() }
/// ```
#[derive(Debug)]
pub struct StreamsGroupMember {
    handle: StreamsMemberHandle,
    events: EventStream<StreamsEvent>,
}

/// The command side of a [`StreamsGroupMember`]: cheap to clone, usable from any task.
#[derive(Debug, Clone)]
pub struct StreamsMemberHandle {
    commands: Commands<StreamsCommand>,
}

impl StreamsGroupMember {
    /// Validates the configuration, draws the member id from the OS CSPRNG (KIP-1082; unless
    /// `group.member_id` is set) and starts the member's task, which joins the group at once.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (the member's task is spawned with [`tokio::spawn`]).
    pub fn start<T: Transport>(
        transport: Arc<T>,
        group: GroupConfig,
        streams: StreamsConfig,
        process: StreamsProcess,
    ) -> Result<Self, ConfigError> {
        Self::start_with(None, transport, (group, streams, process))
    }

    /// As [`start`](Self::start), but the member's task runs on `runtime` (see
    /// [`GroupMember::start_on`](super::GroupMember::start_on)); works outside any runtime.
    pub fn start_on<T: Transport>(
        runtime: &tokio::runtime::Handle,
        transport: Arc<T>,
        group: GroupConfig,
        streams: StreamsConfig,
        process: StreamsProcess,
    ) -> Result<Self, ConfigError> {
        Self::start_with(Some(runtime), transport, (group, streams, process))
    }

    fn start_with<T: Transport>(
        runtime: Option<&tokio::runtime::Handle>,
        transport: Arc<T>,
        (group, streams, process): (GroupConfig, StreamsConfig, StreamsProcess),
    ) -> Result<Self, ConfigError> {
        Ok(Self::spawn(
            transport,
            member(group, streams, process)?,
            runtime,
        ))
    }

    fn spawn<T: Transport>(
        transport: Arc<T>,
        member: StreamsMember,
        runtime: Option<&tokio::runtime::Handle>,
    ) -> Self {
        let request_timeout = member.config().request_timeout;
        let task = StreamsTask {
            calls: OffsetCalls::default(),
        };
        let (commands, events) = start(
            runtime,
            transport,
            (member, task),
            request_timeout,
            StreamsEvent::Fatal,
        );
        Self {
            handle: StreamsMemberHandle { commands },
            events,
        }
    }

    /// A handle for other tasks.
    pub fn handle(&self) -> StreamsMemberHandle {
        self.handle.clone()
    }

    /// The next event; `None` once the member's task ended (after [`StreamsEvent::Closed`] or
    /// [`StreamsEvent::Fatal`]). Waiting here counts as the application polling
    /// (`max.poll.interval.ms`). Cancel-safe.
    pub async fn next_event(&mut self) -> Option<StreamsEvent> {
        self.events.next().await
    }

    /// See [`StreamsMemberHandle::poll`].
    pub async fn poll(&self) -> Result<(), ApiMisuse> {
        self.handle.poll().await
    }

    /// See [`StreamsMemberHandle::complete_revocation`].
    pub async fn complete_revocation(&self, ticket: RevokeTicket) -> Result<(), ApiMisuse> {
        self.handle.complete_revocation(ticket).await
    }

    /// See [`StreamsMemberHandle::set_task_offsets`].
    pub async fn set_task_offsets(
        &self,
        offsets: BTreeMap<TaskId, i64>,
        end_offsets: BTreeMap<TaskId, i64>,
    ) -> Result<(), ApiMisuse> {
        self.handle.set_task_offsets(offsets, end_offsets).await
    }

    /// See [`StreamsMemberHandle::commit`].
    pub async fn commit(&self, offsets: Vec<CommitOffset>) -> Result<(), CommitError> {
        self.handle.commit(offsets).await
    }

    /// See [`StreamsMemberHandle::committed`].
    pub async fn committed(&self, partitions: Vec<TopicPartition>) -> Result<Offsets, CommitError> {
        self.handle.committed(partitions).await
    }

    /// See [`StreamsMemberHandle::leave_group`].
    pub async fn leave_group(&self) -> Result<(), ApiMisuse> {
        self.handle.leave_group().await
    }

    /// See [`StreamsMemberHandle::request_shutdown`].
    pub async fn request_shutdown(&self) -> Result<(), ApiMisuse> {
        self.handle.request_shutdown().await
    }

    /// See [`StreamsMemberHandle::snapshot`].
    pub async fn snapshot(&self) -> Option<StreamsSnapshot> {
        self.handle.snapshot().await
    }

    /// See [`StreamsMemberHandle::close`]. Keep reading events after it until `None`.
    pub async fn close(&self, options: CloseOptions) -> CloseOutcome {
        self.handle.close(options).await
    }
}

impl futures_core::Stream for StreamsGroupMember {
    type Item = StreamsEvent;

    /// The events of [`next_event`](StreamsGroupMember::next_event), with the same polling
    /// rule.
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<StreamsEvent>> {
        self.events.poll_next(cx)
    }
}

impl StreamsMemberHandle {
    /// Records that the application is alive without reading an event (after a poll timeout:
    /// rejoins).
    pub async fn poll(&self) -> Result<(), ApiMisuse> {
        self.commands.call(StreamsCommand::Poll).await
    }

    /// Hands back the ticket of a [`StreamsEvent::TasksRevoking`] (after committing the
    /// revoked active tasks).
    pub async fn complete_revocation(&self, ticket: RevokeTicket) -> Result<(), ApiMisuse> {
        self.commands
            .call(|tx| StreamsCommand::CompleteRevocation(ticket, tx))
            .await
    }

    /// The changelog offsets and end offsets per task (see
    /// [`StreamsMember::set_task_offsets`]).
    pub async fn set_task_offsets(
        &self,
        offsets: BTreeMap<TaskId, i64>,
        end_offsets: BTreeMap<TaskId, i64>,
    ) -> Result<(), ApiMisuse> {
        self.commands
            .call(|tx| StreamsCommand::TaskOffsets(offsets, end_offsets, tx))
            .await
    }

    /// Commits `offsets` of input partitions of the member's active tasks
    /// ([`StreamsMember::input_partitions`]), fenced by the member epoch as
    /// [`StreamsMember::commit`] says: a standby's partitions, a revoked or lost task's, and
    /// anything after the member left are refused, typed. Commit a revoked task's progress
    /// before handing its ticket back. Retriable failures are retried with the member's KIP-580
    /// backoff, the whole call bounded by `default.api.timeout.ms` ([`CommitError::TimedOut`]).
    pub async fn commit(&self, offsets: Vec<CommitOffset>) -> Result<(), CommitError> {
        (self
            .commands
            .ask(|tx| StreamsCommand::Commit(offsets, tx))
            .await)
            .unwrap_or(Err(CommitError::Closed))
    }

    /// The committed offsets of `partitions` (e.g. the input partitions of a task just
    /// assigned); a partition with no commit comes back with
    /// [`offset: None`](crate::CommittedOffset::offset). Retried and bounded like
    /// [`commit`](Self::commit).
    pub async fn committed(&self, partitions: Vec<TopicPartition>) -> Result<Offsets, CommitError> {
        (self
            .commands
            .ask(|tx| StreamsCommand::Fetch(partitions, tx))
            .await)
            .unwrap_or(Err(CommitError::Closed))
    }

    /// Leaves the group for good with epoch -1, static member or not (tasks released first).
    pub async fn leave_group(&self) -> Result<(), ApiMisuse> {
        self.commands.call(StreamsCommand::LeaveGroup).await
    }

    /// Asks every member of the application to shut down (see
    /// [`StreamsMember::request_shutdown`]).
    pub async fn request_shutdown(&self) -> Result<(), ApiMisuse> {
        self.commands.call(StreamsCommand::RequestShutdown).await
    }

    /// The member's id, epoch, state, tasks and withheld tasks; `None` once its task ended.
    pub async fn snapshot(&self) -> Option<StreamsSnapshot> {
        self.commands.ask(StreamsCommand::Snapshot).await
    }

    /// Closes the member (default: the leave heartbeat with -2 for a static member, which
    /// keeps its tasks at the broker until the session times out, -1 for a dynamic one) and
    /// waits until the leave, if one is due, was answered (at most `request.timeout.ms`).
    /// Keep reading events until `None`.
    pub async fn close(&self, options: CloseOptions) -> CloseOutcome {
        self.commands.close(options).await
    }
}

/// The member the configuration describes, its per-member inputs drawn ([`draw_identity`]).
fn member(
    group: GroupConfig,
    streams: StreamsConfig,
    process: StreamsProcess,
) -> Result<StreamsMember, ConfigError> {
    StreamsMember::new(draw_identity(group), streams, process, now())
}

/// What a [`StreamsGroupMember`]'s task does of its own: it joins at once, and counts the task
/// guard's interventions and the lease's expiries.
struct StreamsTask {
    calls: OffsetCalls,
}

impl MemberTask for StreamsTask {
    type Machine = StreamsMember;
    type Command = StreamsCommand;

    fn start(&mut self, member: &mut StreamsMember, now: Instant) {
        // A fresh member always joins (it is neither stopped nor closing).
        let _ = member.join(now);
    }

    fn sent(&mut self, out: &Outbound, _now: Instant) {
        tracing::trace!(id = %out.id, target = %out.target, api = ?out.request.api_key(), "sending");
    }

    fn polled(member: &mut StreamsMember, at: Instant) {
        member.poll(at);
    }

    fn event(&mut self, member: &mut StreamsMember, event: StreamsEvent) -> Option<StreamsEvent> {
        let group = &member.config().group_id;
        match &event {
            // The guard logged the intervention (a `warn` line); count it.
            StreamsEvent::GuardIntervened(i) => {
                let kind = match i.kind {
                    InterventionKind::Withheld => "withheld",
                    InterventionKind::GaveUp => "given_up",
                    _ => "other",
                };
                crate::metrics::task_guard_intervened(group, kind);
            }
            StreamsEvent::TasksLost {
                reason: Reason::LeaseExpired,
                ..
            } => crate::metrics::streams_lease_expired(group),
            _ => {}
        }
        match event {
            StreamsEvent::Committed { id, result } => (self.calls.committed(id, result))
                .map(|result| StreamsEvent::Committed { id, result }),
            StreamsEvent::OffsetsFetched { id, result } => (self.calls.fetched(id, result))
                .map(|result| StreamsEvent::OffsetsFetched { id, result }),
            other => Some(other),
        }
    }

    fn ends(event: &StreamsEvent) -> bool {
        matches!(event, StreamsEvent::Closed | StreamsEvent::Fatal(_))
    }

    fn close_outcome(member: &StreamsMember) -> Option<CloseOutcome> {
        member.close_outcome()
    }

    fn apply(&mut self, member: &mut StreamsMember, command: StreamsCommand, now: Instant) {
        let stopped = |m: &StreamsMember| match m.state() {
            MemberState::Fatal | MemberState::Closed => Err(ApiMisuse::Stopped),
            _ => Ok(()),
        };
        match command {
            StreamsCommand::Poll(tx) => {
                member.poll(now);
                drop(tx.send(stopped(member)))
            }
            StreamsCommand::CompleteRevocation(ticket, tx) => {
                drop(tx.send(member.complete_revocation(ticket, now)))
            }
            StreamsCommand::TaskOffsets(offsets, end_offsets, tx) => {
                member.set_task_offsets(offsets, end_offsets);
                drop(tx.send(stopped(member)))
            }
            StreamsCommand::Commit(offsets, tx) => {
                self.calls.commit(member.commit(offsets, now), tx)
            }
            StreamsCommand::Fetch(partitions, tx) => {
                self.calls.fetch(member.fetch_offsets(partitions, now), tx)
            }
            StreamsCommand::LeaveGroup(tx) => {
                member.leave_group(now);
                drop(tx.send(stopped(member)))
            }
            StreamsCommand::RequestShutdown(tx) => {
                member.request_shutdown(now);
                drop(tx.send(stopped(member)))
            }
            StreamsCommand::Snapshot(tx) => drop(tx.send(StreamsSnapshot {
                member_id: member.member_id().to_owned(),
                epoch: member.epoch(),
                state: member.state(),
                tasks: member.tasks().clone(),
                withheld: member.withheld().clone(),
                coordinator: member.coordinator().map(|b| b.node_id),
                process_id: member.process().process_id(),
            })),
        }
    }

    fn close(member: &mut StreamsMember, options: CloseOptions, now: Instant) -> MemberState {
        member.close(options, now);
        member.state()
    }
}

#[cfg(test)]
mod tests {
    use std::ops::ControlFlow;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use tokio::sync::mpsc;

    use super::super::{Loop, MemberLoop};
    use super::*;
    use crate::error::GroupError;
    use crate::machine::streams::{Intervention, Subtopology};
    use crate::member_id::MemberId;

    fn member() -> StreamsMember {
        let mut config = GroupConfig::new("app");
        config.member_id = Some(MemberId::generate());
        let topology = crate::machine::streams::StreamsTopology::new(
            0,
            vec![Subtopology::new("0", ["in".to_string()])],
        );
        let process = StreamsProcess::new("p", None);
        StreamsMember::new(config, StreamsConfig::new(topology), process, now()).unwrap()
    }

    fn streams_loop(events: mpsc::UnboundedSender<StreamsEvent>) -> MemberLoop<StreamsTask> {
        let task = StreamsTask {
            calls: OffsetCalls::default(),
        };
        MemberLoop::new(task, events, Arc::default())
    }

    fn intervention(kind: InterventionKind) -> StreamsEvent {
        StreamsEvent::GuardIntervened(Intervention {
            kind,
            task: TaskId::new("0", 1),
            role: TaskRole::Standby,
            other_member: "other".into(),
            other_role: TaskRole::Active,
        })
    }

    #[test]
    fn guard_interventions_are_counted_by_kind_and_reach_the_application() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut l = streams_loop(tx);
        let mut m = member();
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        ::metrics::with_local_recorder(&recorder, || {
            l.event(&mut m, intervention(InterventionKind::GaveUp));
            l.event(&mut m, intervention(InterventionKind::Withheld));
            l.event(&mut m, intervention(InterventionKind::Withheld));
        });
        let mut counts = BTreeMap::new();
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            assert_eq!(
                key.key().name(),
                crate::metrics::TASK_GUARD_INTERVENTIONS_TOTAL
            );
            let labels: BTreeMap<String, String> = key
                .key()
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            assert_eq!(labels["group"], "app");
            assert_eq!(labels["protocol"], "streams");
            let DebugValue::Counter(n) = value else {
                panic!("not a counter: {value:?}")
            };
            counts.insert(labels["kind"].clone(), n);
        }
        assert_eq!(
            counts,
            BTreeMap::from([("given_up".to_string(), 1), ("withheld".to_string(), 2)])
        );
        for _ in 0..3 {
            assert!(matches!(
                rx.try_recv(),
                Ok(StreamsEvent::GuardIntervened(_))
            ));
        }
        // The loop goes on until the member closed or stopped.
        assert_eq!(l.idle(&mut m), ControlFlow::Continue(()));
    }

    #[test]
    fn the_loop_ends_after_closed_or_fatal() {
        for end in [
            StreamsEvent::Closed,
            StreamsEvent::Fatal(GroupError::StreamsProtocolUnsupported),
        ] {
            let (tx, _rx) = mpsc::unbounded_channel();
            let mut l = streams_loop(tx);
            let mut m = member();
            let (close_tx, mut close_rx) = oneshot::channel();
            l.leave.closing.push(close_tx);
            l.event(&mut m, end);
            assert_eq!(l.idle(&mut m), ControlFlow::Break(()));
            // No leave went out: the close is told none was due.
            assert_eq!(close_rx.try_recv(), Ok(CloseOutcome::NotDue));
        }
    }
}
