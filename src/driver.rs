//! Runs a sans-IO [`Machine`] over a [`Transport`] on tokio: sends what the machine asks for,
//! feeds answers back with the current time, and sleeps until its next deadline.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;

use crate::backoff::ExponentialBackoff;
use crate::config::ClientConfig;
use crate::core::Machine;
use crate::core::coordinator::{CoordinatorLookup, KeyState, LookupConfig};
use crate::error::{Error, TransportError};
use crate::request::{Broker, Outbound, RequestId, Response};
use crate::transport::Transport;

/// Drives `machine` until `done` returns `Some`, and returns that value. Requests run
/// concurrently; answers are handed back in the order they arrive.
pub async fn run_until<M, T, R>(
    machine: &mut M,
    transport: &Arc<T>,
    mut done: impl FnMut(&mut M) -> Option<R>,
) -> R
where
    M: Machine,
    T: Transport,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<Answer>();
    loop {
        while let Some(out) = machine.poll_request() {
            tracing::trace!(id = %out.id, target = %out.target, api = ?out.request.api_key(), "sending");
            dispatch(transport.clone(), out, tx.clone()).await;
        }
        if let Some(r) = done(machine) {
            return r;
        }
        let deadline = machine.poll_timeout();
        tokio::select! {
            Some((id, result)) = rx.recv() => machine.handle_response(id, *result, Instant::now()),
            _ = sleep_until(deadline) => machine.handle_timeout(Instant::now()),
        }
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
use crate::core::TopicPartition;
use crate::core::classic::ApiMisuse;
use crate::core::events::{
    CloseOptions, CommitError, CommitId, CommitOffset, CommittedOffset, Event, FetchId,
    RevokeTicket,
};
use crate::core::member::Member;
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
    /// The state's name.
    pub state: &'static str,
    /// Owned partitions.
    pub assignment: Vec<TopicPartition>,
    /// The coordinator's node id, when known.
    pub coordinator: Option<i32>,
    /// Whether the member led its last rebalance (classic only).
    pub leader: bool,
    /// The protocol in use: "classic" or "consumer".
    pub protocol: &'static str,
}

/// A group member running on tokio, classic or KIP-848 by `group.protocol`: the async face of
/// [`Member`].
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use consumer_membership::config::{ClientConfig, GroupConfig};
/// use consumer_membership::core::events::{CloseOptions, CommitOffset, Event};
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
                .unwrap_or_else(|| Err(CommitError::Stopped("member task ended".into())))
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
                .unwrap_or_else(|| Err(CommitError::Stopped("member task ended".into())))
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

async fn run_member<T: Transport>(
    mut member: Member,
    mut metrics: crate::metrics::MemberMetrics,
    transport: Arc<T>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    events: mpsc::UnboundedSender<Event>,
) {
    let (resp_tx, mut responses) = mpsc::unbounded_channel::<Answer>();
    let mut commits: HashMap<CommitId, oneshot::Sender<Result<(), CommitError>>> = HashMap::new();
    let mut fetches: HashMap<FetchId, oneshot::Sender<Result<Offsets, CommitError>>> =
        HashMap::new();
    let mut closing: Vec<oneshot::Sender<()>> = Vec::new();
    let mut handles_gone = false;
    loop {
        while let Some(out) = member.poll_request() {
            metrics.on_request(out.id, out.request.api_key(), Instant::now());
            dispatch(transport.clone(), out, resp_tx.clone()).await;
        }
        let mut closed = false;
        while let Some(event) = member.poll_event() {
            metrics.on_event(&event, Instant::now());
            match event {
                Event::Committed { id, result } => match commits.remove(&id) {
                    Some(tx) => drop(tx.send(result)),
                    None => drop(events.send(Event::Committed { id, result })),
                },
                Event::OffsetsFetched { id, result } => match fetches.remove(&id) {
                    Some(tx) => drop(tx.send(result)),
                    None => drop(events.send(Event::OffsetsFetched { id, result })),
                },
                Event::Closed => {
                    closed = true;
                    let _ = events.send(Event::Closed);
                }
                other => drop(events.send(other)),
            }
        }
        if closed {
            for tx in closing.drain(..) {
                let _ = tx.send(());
            }
            return;
        }
        let deadline = member.poll_timeout().map(|(at, _)| at);
        tokio::select! {
            command = commands.recv(), if !handles_gone => {
                let now = Instant::now();
                match command {
                    Some(Command::Subscribe(topics, tx)) => drop(tx.send(member.subscribe(topics, now))),
                    Some(Command::SubscribeRegex(pattern, tx)) => drop(tx.send(member.subscribe_regex(pattern, now))),
                    Some(Command::Unsubscribe) => member.unsubscribe(now),
                    Some(Command::Poll) => member.poll(now),
                    Some(Command::CompleteRevocation(ticket, tx)) => drop(tx.send(member.complete_revocation(ticket, now))),
                    Some(Command::Commit(offsets, tx)) => {
                        commits.insert(member.commit(offsets, now), tx);
                    }
                    Some(Command::Fetch(partitions, tx)) => {
                        fetches.insert(member.fetch_offsets(partitions, now), tx);
                    }
                    Some(Command::Snapshot(tx)) => drop(tx.send(Snapshot {
                        member_id: member.member_id().to_owned(),
                        generation: member.generation(),
                        state: member.state(),
                        assignment: member.assignment(),
                        coordinator: member.coordinator().map(|b| b.node_id),
                        leader: member.is_leader(),
                        protocol: member.protocol(),
                    })),
                    Some(Command::Close(options, tx)) => {
                        closing.push(tx);
                        member.close(options, now);
                        // A stopped member has nothing to leave; otherwise `Event::Closed` ends
                        // the loop above once the LeaveGroup (if any) was answered.
                        if member.state() == "Fatal" {
                            return;
                        }
                    }
                    // Every handle is gone: close with the default semantics.
                    None => {
                        handles_gone = true;
                        member.close(CloseOptions::Default, now);
                        if member.state() == "Fatal" {
                            return;
                        }
                    }
                }
            }
            Some((id, result)) = responses.recv() => {
                let now = Instant::now();
                metrics.on_response(id, &result, now);
                member.handle_response(id, *result, now);
            }
            _ = sleep_until(deadline) => member.handle_timeout(Instant::now()),
        }
    }
}
