//! Runs a sans-IO [`Machine`] over a [`Transport`] on tokio: sends what the machine asks for,
//! feeds answers back with the current time, and sleeps until its next deadline.
//!
//! This module holds the drive loop and what every member's task shares (the loop around a
//! member, its command channel, its event stream, its close); the members' own faces are
//! [`GroupMember`] (classic and KIP-848, `group`) and [`StreamsGroupMember`] (KIP-1071,
//! `streams`).

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::backoff::ExponentialBackoff;
use crate::config::{ClientConfig, GroupConfig};
use crate::error::{ApiMisuse, Error, GroupError, TransportError};
use crate::machine::Machine;
use crate::machine::coordinator::{CoordinatorLookup, KeyState, LookupConfig};
pub use crate::machine::events::CloseOutcome;
use crate::machine::events::{CloseOptions, CommitError, CommitId, FetchId, MemberState};
use crate::machine::offsets::Offsets;
use crate::member_id::MemberId;
use crate::request::{Broker, Outbound, RequestId, Response};
use crate::transport::Transport;

mod group;
mod share;
mod streams;

pub use group::{GroupMember, MemberHandle, Snapshot};
pub use share::{ShareGroupMember, ShareMemberHandle, ShareSnapshot};
pub use streams::{StreamsGroupMember, StreamsMemberHandle, StreamsSnapshot};

/// Commits and offset fetches whose callers wait for the outcome, by id: `commit()` and
/// `committed()` of every member face return what the machine reports for them.
#[derive(Debug, Default)]
struct OffsetCalls {
    commits: HashMap<CommitId, oneshot::Sender<Result<(), CommitError>>>,
    fetches: HashMap<FetchId, oneshot::Sender<Result<Offsets, CommitError>>>,
}

impl OffsetCalls {
    fn commit(&mut self, id: CommitId, caller: oneshot::Sender<Result<(), CommitError>>) {
        self.commits.insert(id, caller);
    }

    fn fetch(&mut self, id: FetchId, caller: oneshot::Sender<Result<Offsets, CommitError>>) {
        self.fetches.insert(id, caller);
    }

    /// Hands a commit's outcome to its caller; gives it back when nobody waits for it.
    fn committed(
        &mut self,
        id: CommitId,
        result: Result<(), CommitError>,
    ) -> Option<Result<(), CommitError>> {
        match self.commits.remove(&id) {
            Some(caller) => drop(caller.send(result)),
            None => return Some(result),
        }
        None
    }

    /// Hands a fetch's outcome to its caller; gives it back when nobody waits for it.
    fn fetched(
        &mut self,
        id: FetchId,
        result: Result<Offsets, CommitError>,
    ) -> Option<Result<Offsets, CommitError>> {
        match self.fetches.remove(&id) {
            Some(caller) => drop(caller.send(result)),
            None => return Some(result),
        }
        None
    }
}

/// The driver's clock: tokio's, so that a test that pauses tokio's time
/// (`tokio::time::pause()`) moves the members' clock with it.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Drives `machine` until `done` returns `Some`, and returns that value. Requests run
/// concurrently; answers are handed back in the order they arrive; the machine's events are
/// dropped (`done` reads the machine's state).
async fn run_until<M, T, R>(
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
/// succeeds, fails for good, or `default.api.timeout.ms` runs out: then [`GroupError::TimedOut`]
/// names the broker asked last and its last failure (a refused connection, an answer that does
/// not decode, TLS, ...).
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

// ---------------------------------------------------------------------------- member tasks

/// What a member's task does that is its member's own (its commands, its bookkeeping of
/// requests and events, its close); [`MemberLoop`] does the rest alike for every member: the
/// events to the application, the commands to the member, the close and who waits for it.
trait MemberTask: Send + 'static {
    /// The machine the task drives; its events are the member's.
    type Machine: Machine<Event: Send + 'static> + Send + 'static;
    /// The commands of the member's handle (a close aside: see [`Call`]).
    type Command: Send + 'static;

    /// The task begins, before its first input.
    fn start(&mut self, _machine: &mut Self::Machine, _now: Instant) {}
    /// `out` is about to be sent.
    fn sent(&mut self, out: &Outbound, now: Instant);
    /// The answer to request `id` arrived.
    fn answered(
        &mut self,
        _id: RequestId,
        _result: &Result<Response, TransportError>,
        _now: Instant,
    ) {
    }
    /// The application polled at `at`.
    fn polled(machine: &mut Self::Machine, at: Instant);
    /// An event of the machine's: `Some` hands it (or what it becomes) to the application.
    fn event(&mut self, machine: &mut Self::Machine, event: EventOf<Self>)
    -> Option<EventOf<Self>>;
    /// Whether `event` is the member's last (it closed or stopped).
    fn ends(event: &EventOf<Self>) -> bool;
    /// What the member reports of its close.
    fn close_outcome(machine: &Self::Machine) -> Option<CloseOutcome>;
    /// Carries out `command`.
    fn apply(&mut self, machine: &mut Self::Machine, command: Self::Command, now: Instant);
    /// Closes the member with `options`, and says where it stands after.
    fn close(machine: &mut Self::Machine, options: CloseOptions, now: Instant) -> MemberState;
}

/// The events of task `K`'s member.
type EventOf<K> = <<K as MemberTask>::Machine as Machine>::Event;

/// What a member's handle sends the member's task: a close, alike for every member, or a
/// command of the member's own.
enum Call<C> {
    /// Close with these options and answer with the outcome.
    Close(CloseOptions, oneshot::Sender<CloseOutcome>),
    /// A command of the member's own.
    Member(C),
}

/// The tokio side of a member: hands its events to the application (after the member's own
/// bookkeeping), the application's commands to the member, and ends once the member closed or
/// stopped and every close waiting was answered.
struct MemberLoop<K: MemberTask> {
    task: K,
    events: Events<EventOf<K>>,
    leave: LeaveWatch,
}

impl<K: MemberTask> MemberLoop<K> {
    fn new(task: K, events: mpsc::UnboundedSender<EventOf<K>>, polling: Arc<Polling>) -> Self {
        Self {
            task,
            events: Events {
                tx: events,
                polling,
            },
            leave: LeaveWatch::default(),
        }
    }
}

impl<K: MemberTask> Loop<K::Machine> for MemberLoop<K> {
    type Command = Call<K::Command>;
    type Output = ();

    fn sent(&mut self, out: &Outbound, now: Instant) {
        self.task.sent(out, now);
    }

    fn answered(&mut self, id: RequestId, result: &Result<Response, TransportError>, now: Instant) {
        self.task.answered(id, result, now);
    }

    fn polled(&mut self, machine: &mut K::Machine, at: Instant) {
        K::polled(machine, at);
    }

    fn event(&mut self, machine: &mut K::Machine, event: EventOf<K>) {
        let Some(event) = self.task.event(machine, event) else {
            return;
        };
        if K::ends(&event) {
            self.leave.closed(K::close_outcome(machine));
        }
        self.events.send(event);
    }

    fn idle(&mut self, _machine: &mut K::Machine) -> ControlFlow<()> {
        self.leave.finish()
    }

    fn command(
        &mut self,
        machine: &mut K::Machine,
        call: Option<Call<K::Command>>,
    ) -> ControlFlow<()> {
        let now = now();
        let options = match call {
            // Every handle gone: a close with the default semantics.
            None => CloseOptions::Default,
            Some(Call::Close(options, tx)) => {
                self.leave.closing.push(tx);
                options
            }
            Some(Call::Member(command)) => {
                self.task.apply(machine, command, now);
                return ControlFlow::Continue(());
            }
        };
        // A stopped member has nothing to leave (the loop ends); otherwise its last event ends
        // the loop once the leave (if one was due) was answered.
        if K::close(machine, options, now) == MemberState::Fatal {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

/// The close side of a member's loop: who waits for the close, and the outcome the member
/// reported once closed.
#[derive(Default)]
struct LeaveWatch {
    closing: Vec<oneshot::Sender<CloseOutcome>>,
    /// The member emitted its last event (it closed or stopped) with this outcome: the loop
    /// ends when idle.
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

/// The application's end of a member's events: waiting for the next one counts as polling.
#[derive(Debug)]
struct EventStream<E> {
    rx: mpsc::UnboundedReceiver<E>,
    polling: Arc<Polling>,
}

impl<E> EventStream<E> {
    /// The next event; `None` once the member's task ended. Cancel-safe: a wait dropped before
    /// it finished loses no event.
    async fn next(&mut self) -> Option<E> {
        let _waiting = Waiting::begin(&self.polling);
        self.rx.recv().await
    }

    /// An event already handed over, without waiting (no poll).
    fn try_next(&mut self) -> Option<E> {
        self.rx.try_recv().ok()
    }

    /// The events of [`next`](Self::next) as a [`Stream`](futures_core::Stream)'s, with the
    /// same polling rule.
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<E>> {
        // Pending leaves the wait marked until an event is handed over (the member's task ends
        // it then) or the next poll of the stream.
        self.polling.begin();
        let next = self.rx.poll_recv(cx);
        if next.is_ready() {
            self.polling.end(now());
        }
        next
    }
}

/// The command side shared by the members' handles: the channel to the member's task.
struct Commands<C> {
    tx: mpsc::UnboundedSender<Call<C>>,
    /// `request.timeout.ms`: how long a close waits for the leave's answer.
    request_timeout: Duration,
}

impl<C> std::fmt::Debug for Commands<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Commands")
            .field("tx", &self.tx)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

impl<C> Clone for Commands<C> {
    fn clone(&self) -> Self {
        Self {
            tx: self.tx.clone(),
            request_timeout: self.request_timeout,
        }
    }
}

impl<C> Commands<C> {
    async fn ask<R>(&self, make: impl FnOnce(oneshot::Sender<R>) -> C) -> Option<R> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(Call::Member(make(tx))).ok()?;
        rx.await.ok()
    }

    /// Sends `command` without waiting for an answer (lost once the member's task ended).
    fn send(&self, command: C) {
        let _ = self.tx.send(Call::Member(command));
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
        if self.tx.send(Call::Close(options, tx)).is_err() {
            return CloseOutcome::NotDue;
        }
        tokio::time::timeout(self.request_timeout, rx)
            .await
            .unwrap_or(Ok(CloseOutcome::TimedOut))
            .unwrap_or(CloseOutcome::NotDue)
    }
}

/// Starts the task that drives `machine` with `task` (on `runtime`, else on the caller's):
/// returns the commands to it and its events. `request_timeout` bounds a close's wait for the
/// leave's answer; a task that ends by a panic ends the events with `fatal`'s.
fn start<K: MemberTask, T: Transport>(
    runtime: Option<&tokio::runtime::Handle>,
    transport: Arc<T>,
    (machine, task): (K::Machine, K),
    request_timeout: Duration,
    fatal: fn(GroupError) -> EventOf<K>,
) -> (Commands<K::Command>, EventStream<EventOf<K>>) {
    let (tx, commands) = mpsc::unbounded_channel();
    let (event_tx, events) = mpsc::unbounded_channel();
    let polling = Arc::<Polling>::default();
    let l = MemberLoop::new(task, event_tx.clone(), polling.clone());
    spawn_task(
        runtime,
        run(machine, l, transport, commands),
        event_tx,
        fatal,
    );
    let events = EventStream {
        rx: events,
        polling,
    };
    (
        Commands {
            tx,
            request_timeout,
        },
        events,
    )
}

/// A member's task: drives `machine` until the member closed or stopped.
async fn run<K: MemberTask, T: Transport>(
    mut machine: K::Machine,
    mut l: MemberLoop<K>,
    transport: Arc<T>,
    commands: mpsc::UnboundedReceiver<Call<K::Command>>,
) {
    l.task.start(&mut machine, now());
    let polling = l.events.polling.clone();
    drive(
        &mut machine,
        &transport,
        &mut l,
        Some(commands),
        Some(polling),
    )
    .await
}

/// Spawns a member's task on `runtime`, else on the caller's, and a watch over it: a task that
/// ends by a panic ends its member's event stream with `fatal`'s event
/// ([`GroupError::TaskEnded`]) instead of a bare end.
fn spawn_task<E: Send + 'static>(
    runtime: Option<&tokio::runtime::Handle>,
    task: impl std::future::Future<Output = ()> + Send + 'static,
    events: mpsc::UnboundedSender<E>,
    fatal: fn(GroupError) -> E,
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
        let _ = events.send(fatal(GroupError::TaskEnded { reason }));
    }));
}

/// `config` with the per-member inputs the core does not draw itself (it reads no random
/// source): the jitter seed, and the member id from the OS CSPRNG (KIP-1082).
fn draw_identity(mut config: GroupConfig) -> GroupConfig {
    config.seed = config.seed.or_else(|| Some(rand::random()));
    config.member_id = config.member_id.or_else(|| Some(MemberId::generate()));
    config
}
