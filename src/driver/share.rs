//! The tokio face of the KIP-932 share consumer ([`ShareConsumer`]): [`ShareGroupMember`], its
//! [`ShareMemberHandle`] and its [`ShareSnapshot`], on the same member loop, command channel
//! and event stream as [`GroupMember`](super::GroupMember).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::sync::oneshot;

use super::{CloseOutcome, Commands, EventStream, MemberTask, draw_identity, now, start};
use crate::config::GroupConfig;
use crate::error::ConfigError;
use crate::machine::TopicPartition;
use crate::machine::events::{CloseOptions, MemberState};
use crate::machine::share::session::{AcknowledgeType, ShareMisuse};
use crate::machine::share::{
    AckMode, ShareConsumer, ShareEvent, ShareFetchSettings, SharePartition,
};
use crate::request::Outbound;
use crate::transport::Transport;

enum ShareCommand {
    /// The application read this many record events and waits for more.
    FetchMore(u64),
    Acknowledge(
        SharePartition,
        (i64, i64),
        AcknowledgeType,
        oneshot::Sender<Result<(), ShareMisuse>>,
    ),
    Snapshot(oneshot::Sender<ShareSnapshot>),
}

/// A point-in-time view of a share-group member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareSnapshot {
    /// The member id (KIP-1082: drawn once, the same for the member's whole life).
    pub member_id: String,
    /// The member epoch (0 before the first answer and after fencing).
    pub epoch: i32,
    /// Where the member stands.
    pub state: MemberState,
    /// The partitions assigned (shared with other members: records are acquired per member).
    pub assignment: Vec<TopicPartition>,
}

/// A KIP-932 share-group member running on tokio: the async face of [`ShareConsumer`].
///
/// [`start`](Self::start) spawns the member's task, which joins the share group at once with
/// its topics. Records come as [`ShareEvent::Records`] from
/// [`next_event`](Self::next_event) (or the member as a [`Stream`](futures_core::Stream)):
/// each batch holds the record bytes (decode them as any Kafka record batch) and the offset
/// ranges acquired for this member, with their delivery counts. Records are fetched as the
/// application reads them, the way the Java share consumer's `poll()` fetches: the next
/// records are asked for once every record event handed over was read and the application
/// waits for the next event; in [`AckMode::Implicit`] that wait ACCEPTs everything handed over
/// before it. In [`AckMode::Explicit`] (the default) acknowledge each range with
/// [`acknowledge`](ShareMemberHandle::acknowledge): the acknowledgements go out with the next
/// fetch (or the close) and come back as [`ShareEvent::Acknowledged`]. Records not
/// acknowledged when their acquisition lock runs out (the group's
/// `group.share.record.lock.duration.ms`, 30 s by default) go to another delivery.
///
/// [`close`](ShareMemberHandle::close) sends the pending acknowledgements and closes the share
/// sessions, then leaves the group with epoch -1; the task ends after
/// [`ShareEvent::Member`]`(Event::Closed)` or a fatal error, or when the member and every
/// handle are dropped (it then closes).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use consumer_membership::{ClientConfig, CloseOptions, GroupConfig, TcpTransport};
/// use consumer_membership::share::{
///     AckMode, AcknowledgeType, ShareEvent, ShareFetchSettings, ShareGroupMember,
/// };
///
/// let transport = Arc::new(TcpTransport::new(ClientConfig::new("127.0.0.1:9092")?));
/// let mut member = ShareGroupMember::start(
///     transport,
///     GroupConfig::new("jobs"),
///     vec!["jobs".to_string()],
///     ShareFetchSettings::default(),
///     AckMode::Explicit,
/// )?;
/// while let Some(event) = member.next_event().await {
///     if let ShareEvent::Records { records, .. } = event {
///         // Decode `records.records`, process the offsets in `records.acquired`, then:
///         for r in &records.acquired {
///             member
///                 .acknowledge(records.partition, r.first, r.last, AcknowledgeType::Accept)
///                 .await?;
///         }
///     }
/// #   break;
/// }
/// println!("closed: {:?}", member.close(CloseOptions::Default).await);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ShareGroupMember {
    handle: ShareMemberHandle,
    events: EventStream<ShareEvent>,
    /// Record events read so far.
    read: u64,
    /// The count of the last FetchMore sent.
    asked: Option<u64>,
}

/// The command side of a [`ShareGroupMember`]: cheap to clone, usable from any task.
#[derive(Debug, Clone)]
pub struct ShareMemberHandle {
    commands: Commands<ShareCommand>,
}

impl ShareGroupMember {
    /// Validates the configuration (an instance id is refused: share groups have no static
    /// membership), draws the member id from the OS CSPRNG (KIP-1082; unless
    /// `group.member_id` is set) and starts the member's task, which joins the share group
    /// `group.group_id` subscribed to `topics` at once.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (the member's task is spawned with [`tokio::spawn`]).
    pub fn start<T: Transport>(
        transport: Arc<T>,
        group: GroupConfig,
        topics: Vec<String>,
        fetch: ShareFetchSettings,
        mode: AckMode,
    ) -> Result<Self, ConfigError> {
        if topics.is_empty() {
            return Err(ConfigError {
                key: "topics",
                rule: "a share member subscribes to at least one topic".into(),
            });
        }
        let consumer = ShareConsumer::new(draw_identity(group), fetch, mode, now())?;
        let request_timeout = consumer.member().config().request_timeout;
        let task = ShareTask {
            topics,
            delivered: 0,
        };
        let (commands, events) = start(None, transport, (consumer, task), request_timeout, |e| {
            ShareEvent::Member(crate::machine::events::Event::Fatal(e))
        });
        Ok(Self {
            handle: ShareMemberHandle { commands },
            events,
            read: 0,
            asked: None,
        })
    }

    /// A handle for other tasks.
    pub fn handle(&self) -> ShareMemberHandle {
        self.handle.clone()
    }

    /// The next event; `None` once the member's task ended. Waiting here counts as the
    /// application polling (`max.poll.interval.ms`), and once every record event handed over
    /// was read it asks for the next records (see the type's docs). Cancel-safe.
    pub async fn next_event(&mut self) -> Option<ShareEvent> {
        let event = match self.events.try_next() {
            Some(e) => Some(e),
            None => {
                self.ask_for_more();
                self.events.next().await
            }
        };
        self.count(event)
    }

    /// Asks for the next records once, for the record events read so far.
    fn ask_for_more(&mut self) {
        if self.asked != Some(self.read) {
            self.asked = Some(self.read);
            self.handle
                .commands
                .send(ShareCommand::FetchMore(self.read));
        }
    }

    fn count(&mut self, event: Option<ShareEvent>) -> Option<ShareEvent> {
        if matches!(event, Some(ShareEvent::Records { .. })) {
            self.read += 1;
        }
        event
    }

    /// See [`ShareMemberHandle::acknowledge`].
    pub async fn acknowledge(
        &self,
        partition: SharePartition,
        first: i64,
        last: i64,
        kind: AcknowledgeType,
    ) -> Result<(), ShareMisuse> {
        self.handle.acknowledge(partition, first, last, kind).await
    }

    /// See [`ShareMemberHandle::snapshot`].
    pub async fn snapshot(&self) -> Option<ShareSnapshot> {
        self.handle.snapshot().await
    }

    /// See [`ShareMemberHandle::close`]. Keep reading events after it until `None`.
    pub async fn close(&self, options: CloseOptions) -> CloseOutcome {
        self.handle.close(options).await
    }
}

impl futures_core::Stream for ShareGroupMember {
    type Item = ShareEvent;

    /// The events of [`next_event`](ShareGroupMember::next_event), with the same rules.
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ShareEvent>> {
        let this = &mut *self;
        if let Some(e) = this.events.try_next() {
            return Poll::Ready(this.count(Some(e)));
        }
        this.ask_for_more();
        match this.events.poll_next(cx) {
            Poll::Ready(e) => Poll::Ready(this.count(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl ShareMemberHandle {
    /// Acknowledges the delivered offsets `first..=last` of `partition` as `kind`
    /// ([`AckMode::Explicit`]); refused, typed, for offsets not delivered and unacknowledged,
    /// in implicit mode, and after the close. Sent with the next fetch or the close.
    pub async fn acknowledge(
        &self,
        partition: SharePartition,
        first: i64,
        last: i64,
        kind: AcknowledgeType,
    ) -> Result<(), ShareMisuse> {
        (self.commands)
            .ask(|tx| ShareCommand::Acknowledge(partition, (first, last), kind, tx))
            .await
            .unwrap_or(Err(ShareMisuse::Closed))
    }

    /// The member's id, epoch, state and assignment; `None` once its task ended.
    pub async fn snapshot(&self) -> Option<ShareSnapshot> {
        self.commands.ask(ShareCommand::Snapshot).await
    }

    /// Closes: the pending acknowledgements go out and the share sessions close, then the
    /// member leaves with epoch -1; waits until that was answered (at most
    /// `request.timeout.ms`). Keep reading events until `None`.
    pub async fn close(&self, options: CloseOptions) -> CloseOutcome {
        self.commands.close(options).await
    }
}

/// What a [`ShareGroupMember`]'s task does of its own: it subscribes at once, and counts the
/// record events it hands over (a FetchMore for fewer is stale: more were handed over since).
struct ShareTask {
    topics: Vec<String>,
    delivered: u64,
}

impl MemberTask for ShareTask {
    type Machine = ShareConsumer;
    type Command = ShareCommand;

    fn start(&mut self, consumer: &mut ShareConsumer, now: Instant) {
        // A fresh consumer with topics (checked by `start`) always subscribes.
        let _ = consumer.subscribe(std::mem::take(&mut self.topics), now);
    }

    fn sent(&mut self, out: &Outbound, _now: Instant) {
        tracing::trace!(id = %out.id, target = %out.target, api = ?out.request.api_key(), "sending");
    }

    fn polled(consumer: &mut ShareConsumer, at: Instant) {
        consumer.poll(at);
    }

    fn event(&mut self, _consumer: &mut ShareConsumer, event: ShareEvent) -> Option<ShareEvent> {
        if matches!(event, ShareEvent::Records { .. }) {
            self.delivered += 1;
        }
        Some(event)
    }

    fn ends(event: &ShareEvent) -> bool {
        event.ends()
    }

    fn close_outcome(consumer: &ShareConsumer) -> Option<CloseOutcome> {
        consumer.close_outcome()
    }

    fn apply(&mut self, consumer: &mut ShareConsumer, command: ShareCommand, now: Instant) {
        match command {
            ShareCommand::FetchMore(read) if read == self.delivered => consumer.fetch_more(now),
            // Records were handed over since: the application asks again once it read them.
            ShareCommand::FetchMore(_) => consumer.poll(now),
            ShareCommand::Acknowledge(partition, (first, last), kind, tx) => {
                drop(tx.send(consumer.acknowledge(partition, first, last, kind)))
            }
            ShareCommand::Snapshot(tx) => drop(tx.send(ShareSnapshot {
                member_id: consumer.member_id().to_owned(),
                epoch: consumer.member().epoch(),
                state: consumer.state(),
                assignment: consumer.member().assignment(),
            })),
        }
    }

    fn close(consumer: &mut ShareConsumer, options: CloseOptions, now: Instant) -> MemberState {
        consumer.close(options, now);
        consumer.state()
    }
}
