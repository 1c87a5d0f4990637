//! The tokio face of the classic and KIP-848 member ([`Member`]): [`GroupMember`], its
//! [`MemberHandle`] and its [`Snapshot`].

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::sync::oneshot;

use super::{
    CloseOutcome, Commands, EventStream, MemberTask, OffsetCalls, draw_identity, now, start,
};
use crate::config::GroupConfig;
use crate::error::{ApiMisuse, ConfigError, TransportError};
use crate::machine::events::{
    CloseOptions, CommitError, CommitOffset, Event, MemberState, RevokeTicket,
};
use crate::machine::member::Member;
use crate::machine::offsets::Offsets;
use crate::machine::topics::TopicWatch;
use crate::machine::{Machine, TopicPartition};
use crate::metrics::MemberMetrics;
use crate::request::{Outbound, RequestId, Response};
use crate::transport::Transport;

enum Command {
    Subscribe(Vec<String>, oneshot::Sender<Result<(), ApiMisuse>>),
    SubscribeRegex(String, oneshot::Sender<Result<(), ApiMisuse>>),
    Unsubscribe(oneshot::Sender<Result<(), ApiMisuse>>),
    Poll(oneshot::Sender<Result<(), ApiMisuse>>),
    CompleteRevocation(RevokeTicket, oneshot::Sender<Result<(), ApiMisuse>>),
    Commit(Vec<CommitOffset>, oneshot::Sender<Result<(), CommitError>>),
    Fetch(
        Vec<TopicPartition>,
        oneshot::Sender<Result<Offsets, CommitError>>,
    ),
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
/// # Calls and events
///
/// Every call that the member's task answers is `async` and returns a `Result` whose error
/// converts into [`crate::Error`] (so `?` works in a function returning it); the member
/// itself is driven by its own task, so nothing needs to be polled for heartbeats to go out.
/// Events come from [`next_event`](GroupMember::next_event) or, as a
/// [`Stream`](futures_core::Stream), from the member itself. Waiting for the next event counts
/// as the application polling (`max.poll.interval.ms`).
///
/// Events still arrive after [`close`](GroupMember::close): the partitions released
/// ([`Event::Revoked`]), the state changes of the leave, and [`Event::Closed`]; drain them until
/// `None`. [`handle`](GroupMember::handle) gives a clonable [`MemberHandle`] for other tasks
/// (for example one that commits while this one reads events).
///
/// # Memory
///
/// Events are buffered without bound: the member's task never waits for the application to
/// read them (a heartbeat must not wait on the application). An application that stops reading
/// events while the member runs makes that buffer grow by one entry per event (state changes,
/// assignments, revocations, commit outcomes, connection trouble), a few per rebalance in a
/// stable group, a steady stream in one that keeps rebalancing. Nothing is dropped or coalesced:
/// read events, or close the member. Commands from the handles are unbounded too, but every
/// call waits for its answer, so they hold at most one entry per call in flight.
///
/// # Runtime
///
/// [`start`](GroupMember::start) spawns the member's task with [`tokio::spawn`]: call it within
/// a tokio runtime (either flavour; it panics otherwise, as `tokio::spawn` does). The task ends
/// after [`Event::Closed`], after a fatal error, or when the member and every handle are dropped
/// (it then closes with [`CloseOptions::Default`]).
///
/// # Topics
///
/// The member never creates topics. A subscribed topic that does not exist leaves the member in
/// the group with nothing assigned from it; the group's assignment follows once the topic is
/// created.
///
/// ```no_run
/// # async fn demo() -> Result<(), consumer_membership::Error> {
/// use std::sync::Arc;
/// use consumer_membership::{
///     ClientConfig, CloseOptions, CommitOffset, Event, GroupConfig, GroupMember, TcpTransport,
/// };
///
/// let transport = Arc::new(TcpTransport::new(ClientConfig::new("127.0.0.1:9092")?));
/// let group = GroupConfig::new("orders").with_instance_id("orders-worker-1");
/// let mut member = GroupMember::start(transport, group)?;
/// member.subscribe(["orders".to_string()]).await?;
/// while let Some(event) = member.next_event().await {
///     match event {
///         Event::Assigned { added, .. } => println!("now consuming {added:?}"),
///         Event::Revoking { partitions, ticket } => {
///             // Stop processing `partitions`, commit what was processed of them, then hand
///             // the ticket back even if the commit failed (see `Event::Revoking`).
///             let offsets: Vec<CommitOffset> = Vec::new();
///             if let Err(e) = member.commit(offsets).await {
///                 eprintln!("commit of {partitions:?} failed: {e}");
///             }
///             member.complete_revocation(ticket).await?;
///         }
///         Event::Fatal(e) => return Err(e.into()),
///         _ => {}
///     }
/// #   break;
/// }
/// let outcome = member.close(CloseOptions::Default).await;
/// println!("closed: {outcome:?}");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct GroupMember {
    handle: MemberHandle,
    events: EventStream<Event>,
}

/// The command side of a [`GroupMember`]: cheap to clone, usable from any task (for example to
/// commit while another task handles events). Its calls are those of the member.
#[derive(Debug, Clone)]
pub struct MemberHandle {
    commands: Commands<Command>,
}

impl GroupMember {
    /// Validates `config` and starts the member's task (nothing is sent before `subscribe`).
    ///
    /// Give each member a transport of its own (as each Java consumer has its own network
    /// client): a broker serves one request per connection at a time, so a JoinGroup parked for a
    /// rebalance would hold up every other member's heartbeats and SyncGroup on a shared
    /// coordinator connection.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (the member's task is spawned with [`tokio::spawn`]).
    pub fn start<T: Transport>(
        transport: Arc<T>,
        config: GroupConfig,
    ) -> Result<Self, ConfigError> {
        Ok(Self::spawn(transport, Self::member(config)?, None))
    }

    /// As [`start`](GroupMember::start), but the member's task (and the transport's I/O it
    /// starts) runs on `runtime`, which may be another runtime than the caller's, and the call
    /// works outside any runtime.
    ///
    /// Give the membership a runtime of its own (a current-thread runtime on a dedicated thread,
    /// as the Java client has its heartbeat thread) when the application's tasks can keep a
    /// runtime busy for longer than a heartbeat interval: heartbeats then go out on time however
    /// long a batch takes to process. The handle and the events work from any runtime.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use consumer_membership::{ClientConfig, GroupConfig, GroupMember, TcpTransport};
    ///
    /// let membership = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// let transport = Arc::new(TcpTransport::new(ClientConfig::new("127.0.0.1:9092")?));
    /// let member = GroupMember::start_on(membership.handle(), transport, GroupConfig::new("g"))?;
    /// // Keep `membership` driven: run it on a thread of its own.
    /// std::thread::spawn(move || membership.block_on(std::future::pending::<()>()));
    /// # drop(member); Ok(()) }
    /// ```
    pub fn start_on<T: Transport>(
        runtime: &tokio::runtime::Handle,
        transport: Arc<T>,
        config: GroupConfig,
    ) -> Result<Self, ConfigError> {
        Ok(Self::spawn(transport, Self::member(config)?, Some(runtime)))
    }

    /// The member `config` describes, its per-member inputs drawn ([`draw_identity`]).
    fn member(config: GroupConfig) -> Result<Member, ConfigError> {
        Member::new(draw_identity(config), now())
    }

    /// Spawns the task that drives `member` (on `runtime`, else on the caller's).
    fn spawn<T: Transport>(
        transport: Arc<T>,
        member: Member,
        runtime: Option<&tokio::runtime::Handle>,
    ) -> Self {
        let config = member.config();
        let metrics = MemberMetrics::new(&config.group_id, member.protocol(), now());
        let request_timeout = config.request_timeout;
        let task = GroupTask {
            metrics,
            calls: OffsetCalls::default(),
        };
        let topics = TopicWatch::new(member.config());
        let watched = Watched { member, topics };
        let (commands, events) = start(
            runtime,
            transport,
            (watched, task),
            request_timeout,
            Event::Fatal,
        );
        let handle = MemberHandle { commands };
        Self { handle, events }
    }

    /// A handle for other tasks.
    pub fn handle(&self) -> MemberHandle {
        self.handle.clone()
    }

    /// The next event; `None` once the member's task ended (after [`Event::Closed`] or a fatal
    /// error). Waiting here counts as the application polling (`max.poll.interval.ms`).
    ///
    /// Never [`Event::Committed`] nor [`Event::OffsetsFetched`]: those are the sans-IO machine's
    /// answers to its `commit` and `fetch_offsets`; the member's task consumes them to answer
    /// [`commit`](Self::commit) and [`committed`](Self::committed), which return their outcome.
    ///
    /// Cancel-safe: a `next_event()` dropped before it finished (a `select!` branch that lost)
    /// loses no event.
    pub async fn next_event(&mut self) -> Option<Event> {
        self.events.next().await
    }

    /// See [`MemberHandle::subscribe`].
    pub async fn subscribe(
        &self,
        topics: impl IntoIterator<Item = String>,
    ) -> Result<(), ApiMisuse> {
        self.handle.subscribe(topics).await
    }

    /// See [`MemberHandle::subscribe_regex`].
    pub async fn subscribe_regex(&self, pattern: impl Into<String>) -> Result<(), ApiMisuse> {
        self.handle.subscribe_regex(pattern).await
    }

    /// See [`MemberHandle::unsubscribe`].
    pub async fn unsubscribe(&self) -> Result<(), ApiMisuse> {
        self.handle.unsubscribe().await
    }

    /// See [`MemberHandle::poll`].
    pub async fn poll(&self) -> Result<(), ApiMisuse> {
        self.handle.poll().await
    }

    /// See [`MemberHandle::complete_revocation`].
    pub async fn complete_revocation(&self, ticket: RevokeTicket) -> Result<(), ApiMisuse> {
        self.handle.complete_revocation(ticket).await
    }

    /// See [`MemberHandle::commit`].
    pub async fn commit(&self, offsets: Vec<CommitOffset>) -> Result<(), CommitError> {
        self.handle.commit(offsets).await
    }

    /// See [`MemberHandle::committed`].
    pub async fn committed(&self, partitions: Vec<TopicPartition>) -> Result<Offsets, CommitError> {
        self.handle.committed(partitions).await
    }

    /// See [`MemberHandle::snapshot`].
    pub async fn snapshot(&self) -> Option<Snapshot> {
        self.handle.snapshot().await
    }

    /// See [`MemberHandle::close`]. Keep reading events after it until `None`.
    pub async fn close(&self, options: CloseOptions) -> CloseOutcome {
        self.handle.close(options).await
    }

    /// **Test only** (feature `sim`): starts the task of a member built (and adjusted) by the
    /// caller, e.g. one with [`Member::set_java_reset_policy`], which no [`GroupConfig`] field
    /// sets. Unlike [`start`](Self::start) nothing is drawn here: the member's config already
    /// has the `seed` or `member_id` its sans-IO constructor asked for.
    #[cfg(feature = "sim")]
    pub fn start_member<T: Transport>(transport: Arc<T>, member: Member) -> Self {
        Self::spawn(transport, member, None)
    }
}

impl futures_core::Stream for GroupMember {
    type Item = Event;

    /// The events of [`next_event`](GroupMember::next_event), with the same polling rule.
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        self.events.poll_next(cx)
    }
}

impl MemberHandle {
    async fn ask<R>(&self, make: impl FnOnce(oneshot::Sender<R>) -> Command) -> Option<R> {
        self.commands.ask(make).await
    }

    async fn call(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<(), ApiMisuse>>) -> Command,
    ) -> Result<(), ApiMisuse> {
        self.commands.call(make).await
    }

    /// Subscribes to `topics` and joins the group.
    pub async fn subscribe(
        &self,
        topics: impl IntoIterator<Item = String>,
    ) -> Result<(), ApiMisuse> {
        let topics = topics.into_iter().collect();
        self.call(|tx| Command::Subscribe(topics, tx)).await
    }

    /// Subscribes by a regular expression the broker evaluates (RE2/J syntax; consumer protocol
    /// only). With `group.protocol=auto`, a broker without the consumer protocol stops the member
    /// with [`Event::Fatal`]`(`[`GroupError::RegexNeedsConsumerProtocol`](crate::error::GroupError::RegexNeedsConsumerProtocol)`)`:
    /// the classic protocol the member would fall back to has no broker-side regex.
    pub async fn subscribe_regex(&self, pattern: impl Into<String>) -> Result<(), ApiMisuse> {
        let pattern = pattern.into();
        self.call(|tx| Command::SubscribeRegex(pattern, tx)).await
    }

    /// Unsubscribes: owned partitions are released ([`Event::Revoked`]); a dynamic member leaves
    /// the group, a static one keeps its member id and sends no LeaveGroup.
    pub async fn unsubscribe(&self) -> Result<(), ApiMisuse> {
        self.call(Command::Unsubscribe).await
    }

    /// Records that the application is alive (`max.poll.interval.ms`) without reading an event.
    pub async fn poll(&self) -> Result<(), ApiMisuse> {
        self.call(Command::Poll).await
    }

    /// Hands back a revocation ticket: after stopping the revoked partitions and trying to
    /// commit them, whether that commit succeeded or not (see [`Event::Revoking`]).
    pub async fn complete_revocation(&self, ticket: RevokeTicket) -> Result<(), ApiMisuse> {
        self.call(|tx| Command::CompleteRevocation(ticket, tx))
            .await
    }

    /// Commits `offsets`, fenced by the member's generation (or epoch). The member retries
    /// retriable failures (the coordinator moving, loading or timing out, a lost connection)
    /// with its KIP-580 backoff; the whole call, a wait for an unknown coordinator included, is
    /// bounded by `default.api.timeout.ms` ([`CommitError::TimedOut`]). A retry goes out only for
    /// partitions the member still owns ([`CommitError::NotOwned`]).
    pub async fn commit(&self, offsets: Vec<CommitOffset>) -> Result<(), CommitError> {
        self.ask(|tx| Command::Commit(offsets, tx))
            .await
            .unwrap_or(Err(CommitError::Closed))
    }

    /// Fetches committed offsets of `partitions` (retriable failures retried by the member like
    /// commits, bounded by `default.api.timeout.ms` likewise).
    ///
    /// A partition with no committed offset comes back with
    /// [`offset: None`](crate::CommittedOffset::offset) (Kafka's coordinator answers for every
    /// partition asked); read `map.get(&tp).and_then(|c| c.offset)`, which also covers a
    /// partition a coordinator left out, and start those where `auto.offset.reset` says
    /// ([`OffsetReset`](crate::config::OffsetReset)).
    pub async fn committed(&self, partitions: Vec<TopicPartition>) -> Result<Offsets, CommitError> {
        self.ask(|tx| Command::Fetch(partitions, tx))
            .await
            .unwrap_or(Err(CommitError::Closed))
    }

    /// The member's current id, generation, state and assignment; `None` once its task ended.
    pub async fn snapshot(&self) -> Option<Snapshot> {
        self.ask(Command::Snapshot).await
    }

    /// Closes the member (see [`CloseOptions`]; under KIP-848 `Default` sends the leave
    /// heartbeat with epoch -1, or -2 for a static member, which keeps its place until the
    /// session times out) and waits until its leave, if one is due, was answered (at most
    /// `request.timeout.ms`). The outcome says whether the coordinator heard it.
    ///
    /// The member's events do not stop here: drain them until `None`.
    pub async fn close(&self, options: CloseOptions) -> CloseOutcome {
        self.commands.close(options).await
    }
}

/// What a [`GroupMember`]'s task does of its own: the rebalance metrics, and the outcomes of
/// commits and fetches routed to their callers (the other events go to the application).
struct GroupTask {
    metrics: MemberMetrics,
    calls: OffsetCalls,
}

impl MemberTask for GroupTask {
    type Machine = Watched;
    type Command = Command;

    fn sent(&mut self, out: &Outbound, now: Instant) {
        self.metrics.on_request(out.id, out.request.api_key(), now);
    }

    fn answered(&mut self, id: RequestId, result: &Result<Response, TransportError>, now: Instant) {
        self.metrics.on_response(id, result, now);
    }

    fn polled(member: &mut Watched, at: Instant) {
        member.poll(at);
    }

    fn event(&mut self, _member: &mut Watched, event: Event) -> Option<Event> {
        self.metrics.on_event(&event, now());
        match event {
            Event::Committed { id, result } => {
                (self.calls.committed(id, result)).map(|result| Event::Committed { id, result })
            }
            Event::OffsetsFetched { id, result } => {
                (self.calls.fetched(id, result)).map(|result| Event::OffsetsFetched { id, result })
            }
            other => Some(other),
        }
    }

    fn ends(event: &Event) -> bool {
        matches!(event, Event::Closed)
    }

    fn close_outcome(member: &Watched) -> Option<CloseOutcome> {
        member.close_outcome()
    }

    fn apply(&mut self, member: &mut Watched, command: Command, now: Instant) {
        match command {
            Command::Subscribe(topics, tx) => {
                let topics: Vec<String> = topics;
                let result = member.subscribe(topics.clone(), now);
                if result.is_ok() {
                    member.topics.watch(topics, now);
                }
                drop(tx.send(result))
            }
            Command::SubscribeRegex(pattern, tx) => {
                // The broker resolves the pattern to the topics that exist.
                let result = member.subscribe_regex(pattern, now);
                if result.is_ok() {
                    member.topics.watch(Vec::new(), now);
                }
                drop(tx.send(result))
            }
            Command::Unsubscribe(tx) => {
                let refused = member.is_closing().then_some(ApiMisuse::Stopped);
                member.unsubscribe(now);
                member.topics.watch(Vec::new(), now);
                drop(tx.send(refused.map_or(Ok(()), Err)));
            }
            Command::Poll(tx) => {
                let refused = member.is_closing().then_some(ApiMisuse::Stopped);
                member.poll(now);
                drop(tx.send(refused.map_or(Ok(()), Err)));
            }
            Command::CompleteRevocation(ticket, tx) => {
                drop(tx.send(member.complete_revocation(ticket, now)))
            }
            Command::Commit(offsets, tx) => self.calls.commit(member.commit(offsets, now), tx),
            Command::Fetch(partitions, tx) => {
                self.calls.fetch(member.fetch_offsets(partitions, now), tx)
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
        }
    }

    fn close(member: &mut Watched, options: CloseOptions, now: Instant) -> MemberState {
        member.close(options, now);
        member.topics.watch(Vec::new(), now);
        member.state()
    }
}

/// A member and the watch of its subscribed topics, driven as one machine.
#[derive(Debug)]
struct Watched {
    member: Member,
    topics: TopicWatch,
}

impl std::ops::Deref for Watched {
    type Target = Member;
    fn deref(&self) -> &Member {
        &self.member
    }
}

impl std::ops::DerefMut for Watched {
    fn deref_mut(&mut self) -> &mut Member {
        &mut self.member
    }
}

impl Machine for Watched {
    type Event = Event;

    fn poll_request(&mut self) -> Option<Outbound> {
        self.member
            .poll_request()
            .or_else(|| self.topics.poll_request())
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.member
            .poll_event()
            .or_else(|| self.topics.poll_event())
    }

    fn poll_timeout(&self) -> Option<(Instant, crate::machine::timer::Timer)> {
        let (a, b) = (self.member.poll_timeout(), self.topics.poll_timeout());
        a.into_iter().chain(b).min_by_key(|(at, _)| *at)
    }

    fn handle_response(
        &mut self,
        id: RequestId,
        result: Result<Response, TransportError>,
        now: Instant,
    ) {
        if self.topics.is_waiting_for(id) {
            self.topics.handle_response(id, result, now)
        } else {
            self.member.handle_response(id, result, now)
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.member.handle_timeout(now);
        self.topics.handle_timeout(now);
    }
}
