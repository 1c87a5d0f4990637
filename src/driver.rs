//! Runs a sans-IO [`Machine`] over a [`Transport`] on tokio: sends what the machine asks for,
//! feeds answers back with the current time, and sleeps until its next deadline.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;

use crate::backoff::ExponentialBackoff;
use crate::config::ClientConfig;
use crate::error::{Error, TransportError};
use crate::machine::Machine;
use crate::machine::coordinator::{CoordinatorLookup, KeyState, LookupConfig};
use crate::request::{Broker, Outbound, RequestId, Response};
use crate::transport::Transport;

/// Drives `machine` until `done` returns `Some`, and returns that value. Requests run
/// concurrently; answers are handed back in the order they arrive; the machine's events are
/// dropped (`done` reads the machine's state).
pub async fn run_until<M, T, R>(
    machine: &mut M,
    transport: &Arc<T>,
    mut done: impl FnMut(&mut M) -> Option<R>,
) -> R
where
    M: Machine,
    T: Transport,
{
    struct Until<F>(F);
    impl<M: Machine, R, F: FnMut(&mut M) -> Option<R>> Loop<M> for Until<F> {
        type Command = std::convert::Infallible;
        type Output = R;
        fn sent(&mut self, out: &Outbound, _now: Instant) {
            tracing::trace!(id = %out.id, target = %out.target, api = ?out.request.api_key(), "sending");
        }
        fn idle(&mut self, machine: &mut M) -> ControlFlow<R> {
            match (self.0)(machine) {
                Some(r) => ControlFlow::Break(r),
                None => ControlFlow::Continue(()),
            }
        }
    }
    drive(machine, transport, &mut Until(&mut done), None).await
}

/// What a drive loop does around its machine: it sees every request and answer, takes every
/// event, may end the loop whenever the machine is idle (its requests and events drained), and
/// takes the application's commands.
trait Loop<M: Machine> {
    /// A command from the application.
    type Command;
    /// What the loop returns.
    type Output;
    /// `out` is about to be sent.
    fn sent(&mut self, _out: &Outbound, _now: Instant) {}
    /// The answer to request `id` arrived.
    fn answered(
        &mut self,
        _id: RequestId,
        _result: &Result<Response, TransportError>,
        _now: Instant,
    ) {
    }
    /// An event of the machine's.
    fn event(&mut self, _machine: &mut M, _event: M::Event) {}
    /// The machine's requests and events are drained: `Break` ends the loop.
    fn idle(&mut self, _machine: &mut M) -> ControlFlow<Self::Output> {
        ControlFlow::Continue(())
    }
    /// A command (`None`: every sender is gone; no command is asked for after that).
    fn command(
        &mut self,
        _machine: &mut M,
        _command: Option<Self::Command>,
    ) -> ControlFlow<Self::Output> {
        ControlFlow::Continue(())
    }
}

/// The one drive loop: sends what `machine` asks for, hands its events to `l`, feeds answers,
/// deadlines and `commands` back with the current time.
async fn drive<M, T, L>(
    machine: &mut M,
    transport: &Arc<T>,
    l: &mut L,
    mut commands: Option<mpsc::UnboundedReceiver<L::Command>>,
) -> L::Output
where
    M: Machine,
    T: Transport,
    L: Loop<M>,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<Answer>();
    loop {
        while let Some(out) = machine.poll_request() {
            l.sent(&out, Instant::now());
            dispatch(transport.clone(), out, tx.clone()).await;
        }
        while let Some(event) = machine.poll_event() {
            l.event(machine, event);
        }
        if let ControlFlow::Break(r) = l.idle(machine) {
            return r;
        }
        let deadline = machine.poll_timeout().map(|(at, _)| at);
        tokio::select! {
            command = recv(&mut commands), if commands.is_some() => {
                if command.is_none() {
                    commands = None;
                }
                if let ControlFlow::Break(r) = l.command(machine, command) {
                    return r;
                }
            }
            Some((id, result)) = rx.recv() => {
                let now = Instant::now();
                l.answered(id, &result, now);
                machine.handle_response(id, *result, now);
            }
            _ = sleep_until(deadline) => machine.handle_timeout(Instant::now()),
        }
    }
}

/// The next command, or `None` once every sender is gone (never called without a receiver).
async fn recv<C>(commands: &mut Option<mpsc::UnboundedReceiver<C>>) -> Option<C> {
    match commands {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// A request's outcome: its id and the answer or the transport's error, boxed: the channel keeps
/// blocks of 32 slots per member, which at the unboxed size (272 bytes) were a quarter of a
/// member's memory.
type Answer = (RequestId, Box<Result<Response, TransportError>>);
type Answers = mpsc::UnboundedSender<Answer>;

/// Sends `out` on a task of its own after polling it once here: the request takes its place on
/// its connection in the order the machine emitted it (a task spawned later may run first), so
/// e.g. FindCoordinator goes ahead of the metadata a joining member asks for with it.
async fn dispatch<T: Transport>(transport: Arc<T>, out: Outbound, answers: Answers) {
    let id = out.id;
    let mut send =
        Box::pin(async move { transport.send(out.target, out.request, out.timeout).await });
    match std::future::poll_fn(|cx| std::task::Poll::Ready(send.as_mut().poll(cx))).await {
        std::task::Poll::Ready(result) => drop(answers.send((id, Box::new(result)))),
        std::task::Poll::Pending => {
            tokio::spawn(async move { drop(answers.send((id, Box::new(send.await)))) });
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Finds the coordinator of `group`, retrying retriable errors with the KIP-580 backoff until it
/// succeeds or fails for good.
pub async fn find_coordinator<T: Transport>(
    transport: &Arc<T>,
    config: &ClientConfig,
    group: &str,
) -> Result<Broker, Error> {
    let mut lookup = CoordinatorLookup::new(
        [group.to_owned()],
        LookupConfig {
            backoff: ExponentialBackoff::retry(config.retry_backoff, config.retry_backoff_max),
            request_timeout: config.request_timeout,
            seed: rand::random(),
        },
    );
    run_until(&mut lookup, transport, |l| match l.state(group) {
        Some(KeyState::Known(b)) => Some(Ok(b.clone())),
        Some(KeyState::Failed(e)) => Some(Err(Error::Group(e.clone()))),
        _ => None,
    })
    .await
}

// ---------------------------------------------------------------------------- group member

use std::collections::{BTreeMap, HashMap};

use backon::{ExponentialBuilder, Retryable};
use tokio::sync::oneshot;

use crate::config::GroupConfig;
use crate::error::ApiMisuse;
use crate::machine::TopicPartition;
use crate::machine::events::{
    CloseOptions, CommitError, CommitId, CommitOffset, CommittedOffset, Event, FetchId,
    RevokeTicket,
};
use crate::machine::member::Member;
use crate::member_id::MemberId;

type Offsets = BTreeMap<TopicPartition, CommittedOffset>;

enum Command {
    Subscribe(Vec<String>, oneshot::Sender<Result<(), ApiMisuse>>),
    SubscribeRegex(String, oneshot::Sender<Result<(), ApiMisuse>>),
    Unsubscribe,
    Poll,
    CompleteRevocation(RevokeTicket, oneshot::Sender<Result<(), ApiMisuse>>),
    Commit(Vec<CommitOffset>, oneshot::Sender<Result<(), CommitError>>),
    Fetch(
        Vec<TopicPartition>,
        oneshot::Sender<Result<Offsets, CommitError>>,
    ),
    Close(CloseOptions, oneshot::Sender<()>),
    Snapshot(oneshot::Sender<Snapshot>),
}

/// A point-in-time view of the member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The member id (`""` before the coordinator assigned one).
    pub member_id: String,
    /// The generation, -1 outside the group.
    pub generation: i32,
    /// Where the member stands.
    pub state: crate::machine::events::MemberState,
    /// Owned partitions.
    pub assignment: Vec<TopicPartition>,
    /// The coordinator's node id, when known.
    pub coordinator: Option<i32>,
    /// Whether the member led its last rebalance (classic only).
    pub leader: bool,
    /// The protocol in use: classic or consumer (never `Auto`).
    pub protocol: crate::config::GroupProtocol,
}

/// A group member running on tokio, classic or KIP-848 by `group.protocol`: the async face of
/// [`Member`].
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use consumer_membership::config::{ClientConfig, GroupConfig};
/// use consumer_membership::machine::events::{CloseOptions, CommitOffset, Event};
/// use consumer_membership::driver::GroupMember;
/// use consumer_membership::transport::TcpTransport;
///
/// let transport = Arc::new(TcpTransport::new(ClientConfig::new("127.0.0.1:9092")?));
/// let group = GroupConfig::new("orders").with_instance_id("orders-worker-1");
/// let mut member = GroupMember::start(transport, group)?;
/// member.subscribe(["orders".to_string()]).await?;
/// while let Some(event) = member.next_event().await {
///     match event {
///         Event::Assigned { added, .. } => println!("now consuming {added:?}"),
///         Event::Revoking { partitions, ticket } => {
///             // Commit what was processed of `partitions`, then hand the ticket back.
///             let offsets: Vec<CommitOffset> = Vec::new();
///             member.commit(offsets).await?;
///             member.complete_revocation(ticket).await?;
///         }
///         Event::Fatal(e) => return Err(e.into()),
///         _ => {}
///     }
/// #   break;
/// }
/// member.close(CloseOptions::Default).await;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct GroupMember {
    handle: MemberHandle,
    events: mpsc::UnboundedReceiver<Event>,
}

/// The command side of a [`GroupMember`]: cheap to clone, usable from any task (for example to
/// commit while another task handles events).
#[derive(Debug, Clone)]
pub struct MemberHandle {
    commands: mpsc::UnboundedSender<Command>,
    request_timeout: std::time::Duration,
    /// `default.api.timeout.ms`: the bound of a whole commit or committed-offsets call.
    api_timeout: std::time::Duration,
    retry: ExponentialBuilder,
}

impl GroupMember {
    /// Validates `config` and starts the member's task (nothing is sent before `subscribe`).
    ///
    /// Give each member a transport of its own (as each Java consumer has its own network
    /// client): a broker serves one request per connection at a time, so a JoinGroup parked for a
    /// rebalance would hold up every other member's heartbeats and SyncGroup on a shared
    /// coordinator connection.
    pub fn start<T: Transport>(
        transport: Arc<T>,
        mut config: GroupConfig,
    ) -> Result<Self, crate::error::ConfigError> {
        // The core reads no random source: its per-member inputs are drawn here, the member id
        // from the OS CSPRNG (KIP-1082).
        config.seed = config.seed.or_else(|| Some(rand::random()));
        config.member_id = config.member_id.or_else(|| Some(MemberId::generate()));
        let now = Instant::now();
        let member = Member::new(config.clone(), now)?;
        let metrics = crate::metrics::MemberMetrics::new(&config.group_id, member.protocol(), now);
        let (commands, command_rx) = mpsc::unbounded_channel();
        let (event_tx, events) = mpsc::unbounded_channel();
        tokio::spawn(run_member(member, metrics, transport, command_rx, event_tx));
        let handle = MemberHandle {
            commands,
            request_timeout: config.request_timeout,
            api_timeout: config.default_api_timeout,
            retry: ExponentialBuilder::default()
                .with_min_delay(config.retry_backoff)
                .with_max_delay(config.retry_backoff_max)
                .with_factor(2.0)
                .with_jitter()
                .with_total_delay(Some(config.request_timeout)),
        };
        Ok(Self { handle, events })
    }

    /// A handle for other tasks.
    pub fn handle(&self) -> MemberHandle {
        self.handle.clone()
    }

    /// The next event. Waiting here counts as the application polling (`max.poll.interval.ms`).
    /// `None` once the member's task ended.
    pub async fn next_event(&mut self) -> Option<Event> {
        self.handle.poll();
        self.events.recv().await
    }
}

impl std::ops::Deref for GroupMember {
    type Target = MemberHandle;
    fn deref(&self) -> &MemberHandle {
        &self.handle
    }
}

impl MemberHandle {
    async fn ask<R>(&self, make: impl FnOnce(oneshot::Sender<R>) -> Command) -> Option<R> {
        let (tx, rx) = oneshot::channel();
        self.commands.send(make(tx)).ok()?;
        rx.await.ok()
    }

    /// Subscribes to `topics` and joins the group.
    pub async fn subscribe(
        &self,
        topics: impl IntoIterator<Item = String>,
    ) -> Result<(), ApiMisuse> {
        let topics = topics.into_iter().collect();
        self.ask(|tx| Command::Subscribe(topics, tx))
            .await
            .unwrap_or(Err(ApiMisuse::Stopped))
    }

    /// Subscribes by a regular expression the broker evaluates (RE2/J syntax; consumer protocol
    /// only). With `group.protocol=auto`, a broker without the consumer protocol stops the member
    /// with [`Event::Fatal`]`(`[`GroupError::RegexNeedsConsumerProtocol`](crate::error::GroupError::RegexNeedsConsumerProtocol)`)`:
    /// the classic protocol the member would fall back to has no broker-side regex.
    pub async fn subscribe_regex(&self, pattern: impl Into<String>) -> Result<(), ApiMisuse> {
        let pattern = pattern.into();
        self.ask(|tx| Command::SubscribeRegex(pattern, tx))
            .await
            .unwrap_or(Err(ApiMisuse::Stopped))
    }

    /// Unsubscribes (a static member keeps its member id and sends no LeaveGroup).
    pub fn unsubscribe(&self) {
        let _ = self.commands.send(Command::Unsubscribe);
    }

    /// Records that the application is alive (`max.poll.interval.ms`).
    pub fn poll(&self) {
        let _ = self.commands.send(Command::Poll);
    }

    /// Hands back a revocation ticket (after committing the revoked partitions).
    pub async fn complete_revocation(&self, ticket: RevokeTicket) -> Result<(), ApiMisuse> {
        self.ask(|tx| Command::CompleteRevocation(ticket, tx))
            .await
            .unwrap_or(Err(ApiMisuse::Stopped))
    }

    /// Commits `offsets`, fenced by the member's generation; retriable failures (coordinator
    /// moving or loading) are retried with backoff for up to `request.timeout.ms`. The whole
    /// call, a wait for an unknown coordinator included, is bounded by `default.api.timeout.ms`
    /// ([`CommitError::TimedOut`]).
    pub async fn commit(&self, offsets: Vec<CommitOffset>) -> Result<(), CommitError> {
        let once = || async {
            let offsets = offsets.clone();
            self.ask(|tx| Command::Commit(offsets, tx))
                .await
                .unwrap_or(Err(CommitError::Closed))
        };
        let retried = once
            .retry(self.retry)
            .sleep(tokio::time::sleep)
            .when(CommitError::is_retriable);
        self.bounded(retried).await
    }

    /// Fetches committed offsets of `partitions` (retriable failures retried like commits,
    /// bounded by `default.api.timeout.ms` likewise).
    pub async fn committed(&self, partitions: Vec<TopicPartition>) -> Result<Offsets, CommitError> {
        let once = || async {
            let partitions = partitions.clone();
            self.ask(|tx| Command::Fetch(partitions, tx))
                .await
                .unwrap_or(Err(CommitError::Closed))
        };
        let retried = once
            .retry(self.retry)
            .sleep(tokio::time::sleep)
            .when(CommitError::is_retriable);
        self.bounded(retried).await
    }

    async fn bounded<R>(
        &self,
        call: impl std::future::Future<Output = Result<R, CommitError>>,
    ) -> Result<R, CommitError> {
        tokio::time::timeout(self.api_timeout, call)
            .await
            .unwrap_or(Err(CommitError::TimedOut {
                after: self.api_timeout,
            }))
    }

    /// The member's current id, generation, state and assignment.
    pub async fn snapshot(&self) -> Option<Snapshot> {
        self.ask(Command::Snapshot).await
    }

    /// Closes the member (see [`CloseOptions`]) and waits until its LeaveGroup, if one is due,
    /// was answered (at most `request.timeout.ms`).
    pub async fn close(&self, options: CloseOptions) {
        let (tx, rx) = oneshot::channel();
        if self.commands.send(Command::Close(options, tx)).is_ok() {
            let _ = tokio::time::timeout(self.request_timeout, rx).await;
        }
    }
}

/// The tokio side of a [`GroupMember`]: routes commit and fetch outcomes to their callers,
/// the other events to the application, commands to the member, and ends after `Closed`.
struct MemberLoop {
    metrics: crate::metrics::MemberMetrics,
    events: mpsc::UnboundedSender<Event>,
    commits: HashMap<CommitId, oneshot::Sender<Result<(), CommitError>>>,
    fetches: HashMap<FetchId, oneshot::Sender<Result<Offsets, CommitError>>>,
    closing: Vec<oneshot::Sender<()>>,
    closed: bool,
}

impl Loop<Member> for MemberLoop {
    type Command = Command;
    type Output = ();

    fn sent(&mut self, out: &Outbound, now: Instant) {
        self.metrics.on_request(out.id, out.request.api_key(), now);
    }

    fn answered(&mut self, id: RequestId, result: &Result<Response, TransportError>, now: Instant) {
        self.metrics.on_response(id, result, now);
    }

    fn event(&mut self, _member: &mut Member, event: Event) {
        self.metrics.on_event(&event, Instant::now());
        let event = match event {
            Event::Committed { id, result } => match self.commits.remove(&id) {
                Some(tx) => return drop(tx.send(result)),
                None => Event::Committed { id, result },
            },
            Event::OffsetsFetched { id, result } => match self.fetches.remove(&id) {
                Some(tx) => return drop(tx.send(result)),
                None => Event::OffsetsFetched { id, result },
            },
            Event::Closed => {
                self.closed = true;
                Event::Closed
            }
            other => other,
        };
        let _ = self.events.send(event);
    }

    fn idle(&mut self, _member: &mut Member) -> ControlFlow<()> {
        if !self.closed {
            return ControlFlow::Continue(());
        }
        for tx in self.closing.drain(..) {
            let _ = tx.send(());
        }
        ControlFlow::Break(())
    }

    fn command(&mut self, member: &mut Member, command: Option<Command>) -> ControlFlow<()> {
        let now = Instant::now();
        let options = match command {
            // Every handle is gone: close with the default semantics.
            None => CloseOptions::Default,
            Some(command) => match self.apply(member, command, now) {
                Some(options) => options,
                None => return ControlFlow::Continue(()),
            },
        };
        member.close(options, now);
        // A stopped member has nothing to leave; otherwise `Event::Closed` ends the loop once the
        // LeaveGroup (if any) was answered.
        if member.state() == crate::machine::events::MemberState::Fatal {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

impl MemberLoop {
    /// Carries out `command`; a close is left to the caller, with its options.
    fn apply(
        &mut self,
        member: &mut Member,
        command: Command,
        now: Instant,
    ) -> Option<CloseOptions> {
        match command {
            Command::Subscribe(topics, tx) => drop(tx.send(member.subscribe(topics, now))),
            Command::SubscribeRegex(pattern, tx) => {
                drop(tx.send(member.subscribe_regex(pattern, now)))
            }
            Command::Unsubscribe => member.unsubscribe(now),
            Command::Poll => member.poll(now),
            Command::CompleteRevocation(ticket, tx) => {
                drop(tx.send(member.complete_revocation(ticket, now)))
            }
            Command::Commit(offsets, tx) => {
                self.commits.insert(member.commit(offsets, now), tx);
            }
            Command::Fetch(partitions, tx) => {
                self.fetches
                    .insert(member.fetch_offsets(partitions, now), tx);
            }
            Command::Snapshot(tx) => drop(tx.send(Snapshot {
                member_id: member.member_id().to_owned(),
                generation: member.generation(),
                state: member.state(),
                assignment: member.assignment(),
                coordinator: member.coordinator().map(|b| b.node_id),
                leader: member.is_leader(),
                protocol: member.protocol(),
            })),
            Command::Close(options, tx) => {
                self.closing.push(tx);
                return Some(options);
            }
        }
        None
    }
}

async fn run_member<T: Transport>(
    mut member: Member,
    metrics: crate::metrics::MemberMetrics,
    transport: Arc<T>,
    commands: mpsc::UnboundedReceiver<Command>,
    events: mpsc::UnboundedSender<Event>,
) {
    let mut l = MemberLoop {
        metrics,
        events,
        commits: HashMap::new(),
        fetches: HashMap::new(),
        closing: Vec::new(),
        closed: false,
    };
    drive(&mut member, &transport, &mut l, Some(commands)).await
}
