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

mod streams;

/// The driver's clock: tokio's, so that a test that pauses tokio's time
/// (`tokio::time::pause()`) moves the members' clock with it.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}
pub use streams::{StreamsGroupMember, StreamsMemberHandle, StreamsSnapshot};

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
    drive(machine, transport, &mut Until(&mut done), None, None).await
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
    /// The application polled at `at` (see [`Polling`]).
    fn polled(&mut self, _machine: &mut M, _at: Instant) {}
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
/// deadlines and `commands` back with the current time, and before each of them the
/// application's polls (`polling`).
async fn drive<M, T, L>(
    machine: &mut M,
    transport: &Arc<T>,
    l: &mut L,
    mut commands: Option<mpsc::UnboundedReceiver<L::Command>>,
    polling: Option<Arc<Polling>>,
) -> L::Output
where
    M: Machine,
    T: Transport,
    L: Loop<M>,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<Answer>();
    loop {
        while let Some(out) = machine.poll_request() {
            l.sent(&out, now());
            dispatch(transport.clone(), out, tx.clone()).await;
        }
        while let Some(event) = machine.poll_event() {
            l.event(machine, event);
        }
        if let ControlFlow::Break(r) = l.idle(machine) {
            return r;
        }
        let deadline = machine.poll_timeout().map(|(at, _)| at);
        let woken = async {
            match &polling {
                Some(p) => p.wake.notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            command = recv(&mut commands), if commands.is_some() => {
                if command.is_none() {
                    commands = None;
                }
                note_polls(machine, l, polling.as_deref());
                if let ControlFlow::Break(r) = l.command(machine, command) {
                    return r;
                }
            }
            Some((id, result)) = rx.recv() => {
                let now = note_polls(machine, l, polling.as_deref());
                l.answered(id, &result, now);
                machine.handle_response(id, *result, now);
            }
            _ = sleep_until(deadline) => {
                let now = note_polls(machine, l, polling.as_deref());
                machine.handle_timeout(now);
            }
            () = woken => {
                note_polls(machine, l, polling.as_deref());
            }
        }
    }
}

/// Hands the application's polls since the last input to `l` (before the input it returns the
/// time of, so a poll timer due now sees a poll that happened first).
fn note_polls<M: Machine, L: Loop<M>>(
    machine: &mut M,
    l: &mut L,
    polling: Option<&Polling>,
) -> Instant {
    let now = now();
    if let Some(at) = polling.and_then(|p| p.take(now)) {
        l.polled(machine, at);
    }
    now
}

/// How the application polls a member (`max.poll.interval.ms`): as a wait in the Java client's
/// `poll()` does, a wait for the next event counts as polling for as long as it lasts, however
/// quiet the group is. The application's side marks its waits here; the member's task reads
/// them before every input it hands the member (no message per event read).
#[derive(Debug, Default)]
struct Polling {
    /// The application is waiting for the next event.
    waiting: std::sync::atomic::AtomicBool,
    /// When the application last polled, until the member's task read it.
    last: std::sync::Mutex<Option<Instant>>,
    /// Wakes the member's task when a wait begins (a member whose poll timer expired rejoins
    /// then, with no other input to wake it).
    wake: tokio::sync::Notify,
}

impl Polling {
    /// A wait for the next event begins.
    fn begin(&self) {
        self.waiting
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.mark(now());
        self.wake.notify_one();
    }

    /// The wait ended at `at` (an event was read, handed over, or the wait was dropped).
    fn end(&self, at: Instant) {
        self.waiting
            .store(false, std::sync::atomic::Ordering::SeqCst);
        self.mark(at);
    }

    /// An event was handed over at `at`: a wait under way ends there (an event the application
    /// has not asked for yet is no poll).
    fn delivered(&self, at: Instant) {
        if self
            .waiting
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            self.mark(at);
        }
    }

    fn mark(&self, at: Instant) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(at);
    }

    /// For the member's task: `now` while the application waits, else when it last polled if
    /// that was not read yet.
    fn take(&self, now: Instant) -> Option<Instant> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner()).take();
        if self.waiting.load(std::sync::atomic::Ordering::SeqCst) {
            Some(now)
        } else {
            last
        }
    }
}

/// Ends a wait in `next_event` however the wait ends (an event, the end of the stream, or the
/// future dropped by a `select!`).
struct Waiting<'a>(&'a Polling);

impl<'a> Waiting<'a> {
    fn begin(polling: &'a Polling) -> Self {
        polling.begin();
        Self(polling)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.end(now());
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
/// succeeds, fails for good, or `default.api.timeout.ms` runs out: then
/// [`GroupError::TimedOut`](crate::error::GroupError::TimedOut) names the broker asked last and
/// its last failure (a refused connection, an answer that does not decode, TLS, ...).
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
    lookup.set_deadline(now(), config.default_api_timeout);
    run_until(&mut lookup, transport, |l| match l.state(group) {
        Some(KeyState::Known(b)) => Some(Ok(b.clone())),
        Some(KeyState::Failed(e)) => Some(Err(Error::Group(e.clone()))),
        _ => None,
    })
    .await
}

// ---------------------------------------------------------------------------- group member

use std::collections::{BTreeMap, HashMap};

use tokio::sync::oneshot;

use crate::config::GroupConfig;
use crate::error::ApiMisuse;
use crate::machine::TopicPartition;
pub use crate::machine::events::CloseOutcome;
use crate::machine::events::{
    CloseOptions, CommitError, CommitId, CommitOffset, CommittedOffset, Event, FetchId,
    RevokeTicket,
};
use crate::machine::member::Member;
use crate::machine::topics::TopicWatch;
use crate::member_id::MemberId;

type Offsets = BTreeMap<TopicPartition, CommittedOffset>;

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
    Close(CloseOptions, oneshot::Sender<CloseOutcome>),
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
/// let outcome = member.close(CloseOptions::Default).await;
/// println!("closed: {outcome:?}");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct GroupMember {
    handle: MemberHandle,
    events: mpsc::UnboundedReceiver<Event>,
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
    ) -> Result<Self, crate::error::ConfigError> {
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
    ) -> Result<Self, crate::error::ConfigError> {
        Ok(Self::spawn(transport, Self::member(config)?, Some(runtime)))
    }

    /// The member `config` describes, its per-member inputs drawn ([`draw_identity`]).
    fn member(config: GroupConfig) -> Result<Member, crate::error::ConfigError> {
        Member::new(draw_identity(config), now())
    }

    /// Spawns the task that drives `member` (on `runtime`, else on the caller's).
    fn spawn<T: Transport>(
        transport: Arc<T>,
        member: Member,
        runtime: Option<&tokio::runtime::Handle>,
    ) -> Self {
        let config = member.config().clone();
        let now = now();
        let metrics = crate::metrics::MemberMetrics::new(&config.group_id, member.protocol(), now);
        let (commands, command_rx) = Commands::new(config.request_timeout);
        let (event_tx, events) = mpsc::unbounded_channel();
        spawn_task(
            runtime,
            run_member(
                member,
                metrics,
                transport,
                (command_rx, commands.polling.clone()),
                event_tx.clone(),
            ),
            event_tx,
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
    /// Cancel-safe: a `next_event()` dropped before it finished (a `select!` branch that lost)
    /// loses no event.
    pub async fn next_event(&mut self) -> Option<Event> {
        let _waiting = Waiting::begin(&self.handle.commands.polling);
        self.events.recv().await
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
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Event>> {
        // Pending leaves the wait marked until an event is handed over (the member's task ends
        // it then) or the next poll of the stream.
        let polling = self.handle.commands.polling.clone();
        polling.begin();
        let next = self.events.poll_recv(cx);
        if next.is_ready() {
            polling.end(now());
        }
        next
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

    /// Hands back a revocation ticket (after committing the revoked partitions).
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

/// The tokio side of a [`GroupMember`]: routes commit and fetch outcomes to their callers,
/// the other events to the application, commands to the member, and ends after `Closed`.
struct MemberLoop {
    metrics: crate::metrics::MemberMetrics,
    events: Events<Event>,
    commits: HashMap<CommitId, oneshot::Sender<Result<(), CommitError>>>,
    fetches: HashMap<FetchId, oneshot::Sender<Result<Offsets, CommitError>>>,
    leave: LeaveWatch,
}

/// The close side shared by the members' loops: who waits for the close, and the outcome the
/// member reported once closed.
#[derive(Default)]
struct LeaveWatch {
    closing: Vec<oneshot::Sender<CloseOutcome>>,
    /// The member emitted its `Closed` event (or stopped) with this outcome: the loop ends when
    /// idle.
    outcome: Option<CloseOutcome>,
}

impl LeaveWatch {
    /// The member closed or stopped; `outcome` is what it reports of its close.
    fn closed(&mut self, outcome: Option<CloseOutcome>) {
        self.outcome = Some(outcome.unwrap_or(CloseOutcome::NotDue));
    }

    /// Once closed: answers every close waiting and ends the loop.
    fn finish(&mut self) -> ControlFlow<()> {
        let Some(outcome) = &self.outcome else {
            return ControlFlow::Continue(());
        };
        for tx in self.closing.drain(..) {
            let _ = tx.send(outcome.clone());
        }
        ControlFlow::Break(())
    }
}

/// The event side of a member's task: the channel to the application, whose wait for an event
/// ends when one is handed over.
struct Events<E> {
    tx: mpsc::UnboundedSender<E>,
    polling: Arc<Polling>,
}

impl<E> Events<E> {
    fn send(&self, event: E) {
        if self.tx.send(event).is_ok() {
            self.polling.delivered(now());
        }
    }
}

/// The command side shared by the members' handles: the channel to the member's task.
struct Commands<C> {
    tx: mpsc::UnboundedSender<C>,
    /// `request.timeout.ms`: how long a close waits for the leave's answer.
    request_timeout: std::time::Duration,
    /// The application's waits for events, shared with the member's task.
    polling: Arc<Polling>,
}

impl<C> std::fmt::Debug for Commands<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Commands")
            .field("tx", &self.tx)
            .field("request_timeout", &self.request_timeout)
            .field("polling", &self.polling)
            .finish()
    }
}

impl<C> Clone for Commands<C> {
    fn clone(&self) -> Self {
        Self {
            tx: self.tx.clone(),
            request_timeout: self.request_timeout,
            polling: self.polling.clone(),
        }
    }
}

/// The commands every member's task takes alike.
trait MemberCommand: Sized {
    /// Close with `options`.
    fn close(options: CloseOptions, tx: oneshot::Sender<CloseOutcome>) -> Self;
}

impl MemberCommand for Command {
    fn close(options: CloseOptions, tx: oneshot::Sender<CloseOutcome>) -> Self {
        Command::Close(options, tx)
    }
}

impl<C: MemberCommand> Commands<C> {
    fn new(request_timeout: std::time::Duration) -> (Self, mpsc::UnboundedReceiver<C>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Self {
                tx,
                request_timeout,
                polling: Arc::default(),
            },
            rx,
        )
    }

    async fn ask<R>(&self, make: impl FnOnce(oneshot::Sender<R>) -> C) -> Option<R> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(make(tx)).ok()?;
        rx.await.ok()
    }

    /// The member's answer to a command, [`ApiMisuse::Stopped`] once its task ended.
    async fn call(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<(), ApiMisuse>>) -> C,
    ) -> Result<(), ApiMisuse> {
        self.ask(make).await.unwrap_or(Err(ApiMisuse::Stopped))
    }

    async fn close(&self, options: CloseOptions) -> CloseOutcome {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(C::close(options, tx)).is_err() {
            return CloseOutcome::NotDue;
        }
        tokio::time::timeout(self.request_timeout, rx)
            .await
            .unwrap_or(Ok(CloseOutcome::TimedOut))
            .unwrap_or(CloseOutcome::NotDue)
    }
}

/// Spawns a member's task on `runtime`, else on the caller's, and a watch over it: a task that
/// ends by a panic ends its member's event stream with `fatal`'s event
/// ([`GroupError::TaskEnded`](crate::error::GroupError::TaskEnded)) instead of a bare end.
fn spawn_task<E: Send + 'static>(
    runtime: Option<&tokio::runtime::Handle>,
    task: impl std::future::Future<Output = ()> + Send + 'static,
    events: mpsc::UnboundedSender<E>,
    fatal: fn(crate::error::GroupError) -> E,
) {
    let runtime = runtime
        .cloned()
        .unwrap_or_else(tokio::runtime::Handle::current);
    let task = runtime.spawn(task);
    drop(runtime.spawn(async move {
        let Err(ended) = task.await else { return };
        let reason = if ended.is_panic() {
            let panic = ended.into_panic();
            let text = (panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            format!("panicked: {text}")
        } else {
            "cancelled (its runtime shut down)".into()
        };
        tracing::error!(%reason, "member task ended");
        let _ = events.send(fatal(crate::error::GroupError::TaskEnded { reason }));
    }));
}

/// `config` with the per-member inputs the core does not draw itself (it reads no random
/// source): the jitter seed, and the member id from the OS CSPRNG (KIP-1082).
fn draw_identity(mut config: GroupConfig) -> GroupConfig {
    config.seed = config.seed.or_else(|| Some(rand::random()));
    config.member_id = config.member_id.or_else(|| Some(MemberId::generate()));
    config
}

impl Loop<Watched> for MemberLoop {
    type Command = Command;
    type Output = ();

    fn sent(&mut self, out: &Outbound, now: Instant) {
        self.metrics.on_request(out.id, out.request.api_key(), now);
    }

    fn answered(&mut self, id: RequestId, result: &Result<Response, TransportError>, now: Instant) {
        self.metrics.on_response(id, result, now);
    }

    fn polled(&mut self, member: &mut Watched, at: Instant) {
        member.poll(at);
    }

    fn event(&mut self, member: &mut Watched, event: Event) {
        self.metrics.on_event(&event, now());
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
                self.leave.closed(member.close_outcome());
                Event::Closed
            }
            other => other,
        };
        self.events.send(event);
    }

    fn idle(&mut self, _member: &mut Watched) -> ControlFlow<()> {
        self.leave.finish()
    }

    fn command(&mut self, member: &mut Watched, command: Option<Command>) -> ControlFlow<()> {
        let now = now();
        let Some(options) = close_options(command, |c| self.apply(member, c, now)) else {
            return ControlFlow::Continue(());
        };
        member.close(options, now);
        member.topics.watch(Vec::new(), now);
        after_close(member.state())
    }
}

/// The close a loop's command asks for: `None` (every handle gone) closes with the default
/// semantics; a command `apply` carries out asks for one only when it is a close.
fn close_options<C>(
    command: Option<C>,
    apply: impl FnOnce(C) -> Option<CloseOptions>,
) -> Option<CloseOptions> {
    match command {
        None => Some(CloseOptions::Default),
        Some(command) => apply(command),
    }
}

/// After a close: a stopped member has nothing to leave (the loop ends); otherwise its
/// `Closed` event ends the loop once the leave (if one was due) was answered.
fn after_close(state: crate::machine::events::MemberState) -> ControlFlow<()> {
    if state == crate::machine::events::MemberState::Fatal {
        ControlFlow::Break(())
    } else {
        ControlFlow::Continue(())
    }
}

impl MemberLoop {
    /// Carries out `command`; a close is left to the caller, with its options.
    fn apply(
        &mut self,
        member: &mut Watched,
        command: Command,
        now: Instant,
    ) -> Option<CloseOptions> {
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
                self.leave.closing.push(tx);
                return Some(options);
            }
        }
        None
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

async fn run_member<T: Transport>(
    member: Member,
    metrics: crate::metrics::MemberMetrics,
    transport: Arc<T>,
    (commands, polling): (mpsc::UnboundedReceiver<Command>, Arc<Polling>),
    events: mpsc::UnboundedSender<Event>,
) {
    let mut l = MemberLoop {
        metrics,
        events: Events {
            tx: events,
            polling: polling.clone(),
        },
        commits: HashMap::new(),
        fetches: HashMap::new(),
        leave: LeaveWatch::default(),
    };
    let topics = TopicWatch::new(member.config());
    let mut watched = Watched { member, topics };
    drive(
        &mut watched,
        &transport,
        &mut l,
        Some(commands),
        Some(polling),
    )
    .await
}
