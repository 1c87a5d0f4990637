//! Client-side Kafka consumer-group membership.
//!
//! `consumer-membership` joins, heartbeats in, and leaves Kafka consumer groups for Rust consumers
//! that bring their own fetch path (rskafka, `kafka-protocol` users, in-house clients): it decides
//! which partitions this process owns, when it must give them up, and fences its offset commits
//! by its membership. Two protocols:
//!
//! - **classic** (JoinGroup / SyncGroup / Heartbeat / LeaveGroup), with static membership
//!   (`group.instance.id`): a static member that skips LeaveGroup keeps its member id, so it is
//!   never fenced by its own abandoned JoinGroup;
//! - **consumer** (KIP-848, ConsumerGroupHeartbeat), with a member id the client draws itself
//!   (KIP-1082) and keeps on every retry.
//!
//! [`GroupProtocol::Auto`] starts with the consumer protocol and falls back to classic on a
//! broker without it.
//!
//! # The join loop
//!
//! A [`GroupMember`] runs on tokio. Subscribe, then read events: start each assigned partition
//! at its committed offset, else where `auto.offset.reset` says ([`OffsetReset`]); on a
//! revocation stop, commit and hand the ticket back, in that order and even if the commit
//! failed ([`Event::Revoking`]); never commit partitions that were lost; drain the events after
//! `close()` until `None`. The records come from a client of your own (the manual's
//! [`rskafka`](manual::rskafka) page has one); here it is the `Records` trait.
//!
//! ```no_run
//! use consumer_membership::{
//!     ClientConfig, CloseOptions, CommitOffset, Event, GroupConfig, GroupMember, GroupProtocol,
//!     OffsetReset, TcpTransport, TopicPartition,
//! };
//! use std::{sync::Arc, time::Duration};
//!
//! /// Your record client: one fetch-and-process task per owned partition.
//! trait Records {
//!     /// The offset `reset` names in the partition's log (ListOffsets: its log start offset
//!     /// for `Earliest`, its log end offset for `Latest`).
//!     async fn log_offset(&self, tp: &TopicPartition, reset: OffsetReset) -> i64;
//!     /// Starts fetching and processing `tp` from `offset`.
//!     fn start(&mut self, tp: TopicPartition, offset: i64);
//!     /// Stops the tasks of `partitions`, waits until they stopped, and returns for each the
//!     /// position after its last processed record (none if it processed none).
//!     async fn stop(&mut self, partitions: &[TopicPartition]) -> Vec<CommitOffset>;
//!     /// The partitions being processed.
//!     fn owned(&self) -> Vec<TopicPartition>;
//! }
//!
//! # async fn run(mut records: impl Records) -> Result<(), consumer_membership::Error> {
//! let client = ClientConfig::new("127.0.0.1:9092")?;
//! let group = GroupConfig::new("orders")
//!     .with_instance_id("orders-worker-1")
//!     .with_protocol(GroupProtocol::Consumer); // KIP-848; or Classic, or Auto
//! let reset = OffsetReset::Earliest; // auto.offset.reset; Kafka's default is Latest
//! let mut member = GroupMember::start(Arc::new(TcpTransport::new(client)), group)?;
//! member.subscribe(["orders".to_string()]).await?;
//!
//! let deadline = tokio::time::sleep(Duration::from_secs(60));
//! tokio::pin!(deadline);
//! loop {
//!     // `next_event` is cancel-safe: losing the race to the deadline loses no event.
//!     tokio::select! {
//!         event = member.next_event() => match event {
//!             Some(Event::Assigned { added, .. }) => {
//!                 let committed = member.committed(added.clone()).await?;
//!                 for tp in added {
//!                     // No commit yet: `offset: None`. Start where auto.offset.reset says.
//!                     let offset = match committed.get(&tp).and_then(|c| c.offset) {
//!                         Some(offset) => offset,
//!                         None => records.log_offset(&tp, reset).await,
//!                     };
//!                     records.start(tp, offset);
//!                 }
//!             }
//!             Some(Event::Revoking { partitions, ticket }) => {
//!                 // Stop, commit what was processed, hand back: even if the commit failed
//!                 // (the next owner then starts from the last commit that went through).
//!                 let processed = records.stop(&partitions).await;
//!                 if let Err(error) = member.commit(processed).await {
//!                     eprintln!("commit of {partitions:?} failed: {error}");
//!                 }
//!                 member.complete_revocation(ticket).await?;
//!             }
//!             Some(Event::Lost { partitions, reason }) => {
//!                 // Another member may own them already: stop them without committing.
//!                 eprintln!("lost {partitions:?}: {reason}");
//!                 drop(records.stop(&partitions).await);
//!             }
//!             Some(Event::TopicsMissing { topics }) => eprintln!("not created yet: {topics:?}"),
//!             Some(Event::Fatal(error)) => return Err(error.into()),
//!             Some(_) => {}
//!             None => return Ok(()),
//!         },
//!         _ = &mut deadline => break,
//!     }
//! }
//! let owned = records.owned();
//! let processed = records.stop(&owned).await;
//! if let Err(error) = member.commit(processed).await {
//!     // E.g. RebalanceInProgress: close anyway; the next owner starts from the last commit.
//!     eprintln!("final commit: {error}");
//! }
//! let outcome = member.close(CloseOptions::Default).await;
//! eprintln!("close: {outcome:?}");
//! while let Some(event) = member.next_event().await {
//!     eprintln!("after close: {event:?}"); // Revoked, StateChanged, then Closed
//! }
//! # Ok(()) }
//! ```
//!
//! Good to know:
//! - **Topics are never created.** A subscribed topic that does not exist is reported as
//!   [`Event::TopicsMissing`] (and logged), and again as [`Event::TopicsAppeared`] once it
//!   exists; meanwhile the member is in the group with nothing assigned from it.
//! - **Closing.** [`CloseOptions::Default`]: a dynamic member leaves (LeaveGroup; under KIP-848
//!   the heartbeat with epoch -1); a static classic member sends nothing and keeps its member
//!   id; a static KIP-848 member sends the heartbeat with epoch -2, which keeps its place until
//!   the session times out. [`close`](GroupMember::close) returns whether the leave was
//!   answered ([`CloseOutcome`]).
//! - **The consumer protocol** takes the session timeout, the heartbeat interval and the
//!   assignor from the broker (`group.consumer.*` broker configs, `group.remote.assignor`
//!   names one): [`GroupConfig`]'s `session_timeout`, `heartbeat_interval` and `assignors` are
//!   used by the classic protocol only; `remote_assignor` is refused with `Classic`.
//! - **Errors.** Every call's error converts into [`Error`] (`?` works); commits fail with a
//!   typed [`CommitError`] and are never reported as done unless the coordinator said so.
//! - **Your own requests** go through the same [`Transport`](transport::Transport) with
//!   [`Request::Raw`](request::Request::Raw) and the re-exported [`kafka_protocol`] types, at the
//!   versions you name.
//!
//! # Without tokio: the sans-IO machines
//!
//! The protocol logic lives in [`machine`]: plain state machines fed answers and the time, that
//! return the requests to send, the events and the next deadline. They read no clock, no socket
//! and no random source; the [`driver`] is one way to run them. With a runtime of your own:
//!
//! ```no_run
//! use std::time::Instant;
//! use consumer_membership::machine::{Machine, member::Member};
//! use consumer_membership::request::{Outbound, Reply, RequestId};
//! use consumer_membership::{Event, GroupConfig, MemberId};
//!
//! /// Your I/O: sends requests concurrently and hands back answers as they arrive.
//! trait Io {
//!     fn send(&mut self, out: Outbound);
//!     /// The next answer, waiting at most until `until` (forever with `None`).
//!     fn next_answer(&mut self, until: Option<Instant>) -> Option<(RequestId, Reply)>;
//! }
//!
//! fn run(io: &mut impl Io, seed: u64) -> Result<(), consumer_membership::Error> {
//!     // The machine draws nothing itself: the KIP-1082 member id and the jitter seed come in.
//!     let group = GroupConfig::new("orders")
//!         .with_member_id(MemberId::generate())
//!         .with_seed(seed);
//!     let mut member = Member::new(group, Instant::now())?;
//!     member.subscribe(["orders".to_string()], Instant::now())?;
//!     loop {
//!         while let Some(out) = member.poll_request() {
//!             io.send(out);
//!         }
//!         while let Some(event) = member.poll_event() {
//!             match event {
//!                 Event::Closed => return Ok(()),
//!                 other => println!("{other:?}"),
//!             }
//!         }
//!         let deadline = member.poll_timeout().map(|(at, _timer)| at);
//!         match io.next_answer(deadline) {
//!             Some((id, reply)) => member.handle_response(id, reply, Instant::now()),
//!             None => member.handle_timeout(Instant::now()),
//!         }
//!     }
//! }
//! ```
//!
//! # Layers
//!
//! - [`machine`], [`request`], [`config`], [`error`] and the other modules of the sans-IO core
//!   come from the crate [`consumer_membership_core`] (re-exported here under the same paths):
//!   the state machines (their module docs hold the state diagrams and the identity rules), what
//!   they send and are answered, and the wire codec. It has no runtime, socket or clock crate
//!   among its dependencies, and its clippy configuration forbids clock reads and OS random draws;
//!   use it alone to run the machines on a runtime of your own;
//! - [`transport`]: the [`Transport`](transport::Transport) trait, a tokio TCP implementation of
//!   the Kafka wire protocol (TLS and SASL included) and an in-memory one;
//! - [`driver`]: runs a machine over a transport on tokio ([`GroupMember`]).

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "tokio")]
pub mod driver;
pub mod manual;
pub mod member_id_file;
#[cfg(feature = "tokio")]
pub mod metrics;
pub mod transport;

// The sans-IO core (consumer-membership-core), under the paths this crate has always had.
#[cfg(feature = "sim")]
pub use consumer_membership_core::sim;
pub use consumer_membership_core::{
    backoff, config, error, machine, member_id, messages, properties, request,
};

pub use config::{ClientConfig, GroupConfig, GroupProtocol, OffsetReset};
#[cfg(feature = "tokio")]
pub use driver::{GroupMember, MemberHandle, Snapshot};

/// Share groups (KIP-932): the sans-IO share member, its share sessions and the consumer that
/// runs both ([`machine::share`]) and, with feature `tokio`, the member on tokio
/// ([`ShareGroupMember`](share::ShareGroupMember)).
pub mod share {
    #[cfg(feature = "tokio")]
    pub use crate::driver::{ShareGroupMember, ShareMemberHandle, ShareSnapshot};
    pub use crate::machine::share::session::{
        AckError, Acknowledged, AcquiredRange, ShareFetchError, ShareMisuse, ShareRecords,
    };
    pub use crate::machine::share::*;
}

/// Streams groups (KIP-1071): the sans-IO member and its types ([`machine::streams`]) and, with
/// feature `tokio`, the member on tokio ([`StreamsGroupMember`](streams::StreamsGroupMember)).
///
pub mod streams {
    #[cfg(feature = "tokio")]
    pub use crate::driver::{StreamsGroupMember, StreamsMemberHandle, StreamsSnapshot};
    pub use crate::machine::streams::*;
}
pub use error::{ApiMisuse, ConfigError, Error, GroupError, TransportError};
/// The Kafka protocol types of the version this crate speaks (for requests of your own through
/// [`Transport`](transport::Transport) and [`Request::Raw`](request::Request::Raw)).
pub use kafka_protocol;
pub use machine::TopicPartition;
pub use machine::events::{
    CloseOptions, CloseOutcome, CommitError, CommitOffset, CommittedOffset, Event, MemberState,
    Reason, RevokeTicket,
};
pub use member_id::MemberId;
pub use member_id_file::{MemberIdFile, MemberIdFileError};
#[cfg(feature = "tokio")]
pub use transport::TcpTransport;

/// The README's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
