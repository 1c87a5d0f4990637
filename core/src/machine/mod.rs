//! The sans-IO core: state machines fed with events and an injected `now`, returning the requests
//! to send and the deadlines to wake up at. Nothing here touches a socket, an async runtime, a
//! clock or a global random source: the crate has no runtime or socket dependency, and its
//! `clippy.toml` makes `cargo clippy` fail on a clock read or an OS random draw.
//!
//! Every machine has the same shape (the drive contract):
//! - inputs: `handle_response(id, result, now)`, `handle_timeout(now)`, commands;
//! - outputs, drained after every input until empty: `poll_request()`, `poll_event()`,
//!   `poll_timeout()`.
//!
//! # The membership lease
//!
//! A member never goes on believing it owns partitions (tasks) the coordinator may have given
//! away. Every member keeps a lease: the send time `t` of the last request whose answer
//! confirmed its membership (classic: a JoinGroup, a SyncGroup, or a Heartbeat answered without
//! error or with REBALANCE_IN_PROGRESS; consumer and streams: a heartbeat answered with a member
//! epoch). The coordinator restarted the member's session no earlier than it read that request,
//! hence no earlier than `t`, so it cannot have expired the member before `t + session`. The send
//! time, not the answer's arrival, is the conservative bound (the answer may have taken long).
//!
//! When `now - t` reaches `session - heartbeat interval` (the margin is the heartbeat that would
//! have renewed the lease), the member reports everything it owns lost ([`Event::Lost`] /
//! `TasksLost` with [`Reason::LeaseExpired`]): the application must stop processing it and
//! must not commit it, and the member refuses commits locally
//! ([`CommitError::LeaseExpired`]) until a membership is confirmed again. It keeps its member
//! id (and instance id), looks the coordinator up again and rejoins once the coordinator
//! answers: the classic member with a JoinGroup (a JoinGroup already in flight goes on), the
//! consumer and streams members with an epoch-0 heartbeat; answers to requests sent before the
//! expiry cannot restore anything. Every input (answer, timer, poll, commit) checks the lease
//! before anything else, so a member driven again after its process was starved reports the
//! loss first.
//!
//! The session timeout per protocol: classic, the member's own `session.timeout.ms`
//! ([`GroupConfig::session_timeout`](crate::config::GroupConfig::session_timeout), sent in
//! JoinGroup) with `heartbeat.interval.ms` as the margin; consumer and streams, the group's
//! session timeout, which the heartbeat does not carry, from
//! [`GroupConfig::group_session_timeout`](crate::config::GroupConfig::group_session_timeout)
//! (default 45 s, Kafka's; set it to the group's `consumer.session.timeout.ms` /
//! `streams.session.timeout.ms`, or the broker's `group.consumer.session.timeout.ms` /
//! `group.streams.session.timeout.ms`), with the heartbeat interval of the last answer as the
//! margin (5 s, the broker default, before any). When the margin is not below the session the
//! lease holds half the session.
//!
//! A healthy member never loses its lease: its heartbeats are answered every interval, far
//! inside the bound. A classic JoinGroup parked by the coordinator longer than the bound (a
//! rebalance waiting for slow members) does cost a cooperative member the partitions it kept:
//! the member cannot tell a parked JoinGroup from one the coordinator never read. A
//! configured group session timeout above the group's real one weakens the guarantee (the
//! coordinator may expire the member first); one far below it makes the lease fire between
//! heartbeats.

pub mod classic;
pub mod consumer;
pub mod coordinator;
pub mod epoch;
pub mod events;
pub mod member;
pub mod metadata;
pub mod offsets;
pub(crate) mod session;
pub mod share;
mod shell;
mod state;
pub mod streams;
#[cfg(test)]
pub(crate) mod test_support;
pub mod timer;
pub(crate) mod topic_ids;
pub mod topics;

use std::time::Instant;

#[cfg(doc)]
use events::{CommitError, Event, Reason};

use crate::error::TransportError;
use crate::request::{Outbound, RequestId, Response};
use timer::Timer;

pub use crate::partition::{IntoTopicName, TopicPartition};

/// The drive contract every sans-IO machine of this crate follows: the coordinator lookup, both
/// members and the protocol-choosing [`Member`](member::Member). A driver (the tokio driver, the
/// simulation, the model checker) feeds it answers and time and, after every input, drains
/// [`poll_request`](Machine::poll_request) and [`poll_event`](Machine::poll_event) until `None`,
/// then sleeps until [`poll_timeout`](Machine::poll_timeout).
pub trait Machine {
    /// What the machine tells its application.
    type Event;
    /// The next request to send, if any.
    #[must_use]
    fn poll_request(&mut self) -> Option<Outbound>;
    /// The next event for the application, if any.
    #[must_use]
    fn poll_event(&mut self) -> Option<Self::Event>;
    /// When the machine next wants [`handle_timeout`](Machine::handle_timeout) called, and the
    /// timer that is due then.
    #[must_use]
    fn poll_timeout(&self) -> Option<(Instant, Timer)>;
    /// Feeds the outcome of a request the machine emitted.
    fn handle_response(
        &mut self,
        id: RequestId,
        result: Result<Response, TransportError>,
        now: Instant,
    );
    /// Tells the machine the time is `now`; calls before its deadline are harmless.
    fn handle_timeout(&mut self, now: Instant);
}

/// Implements [`Machine`] for a type whose inherent methods of the same names do the work.
macro_rules! machine {
    ($ty:ty, $event:ty) => {
        impl Machine for $ty {
            type Event = $event;
            fn poll_request(&mut self) -> Option<Outbound> {
                <$ty>::poll_request(self)
            }
            fn poll_event(&mut self) -> Option<$event> {
                <$ty>::poll_event(self)
            }
            fn poll_timeout(&self) -> Option<(Instant, Timer)> {
                <$ty>::poll_timeout(self)
            }
            fn handle_response(
                &mut self,
                id: RequestId,
                result: Result<Response, TransportError>,
                now: Instant,
            ) {
                <$ty>::handle_response(self, id, result, now)
            }
            fn handle_timeout(&mut self, now: Instant) {
                <$ty>::handle_timeout(self, now)
            }
        }
    };
}

machine!(coordinator::CoordinatorLookup, coordinator::LookupEvent);
machine!(classic::ClassicMember, events::Event);
machine!(consumer::ConsumerMember, events::Event);
machine!(member::Member, events::Event);
machine!(share::ShareMember, events::Event);
machine!(streams::StreamsMember, streams::StreamsEvent);
machine!(topics::TopicWatch, events::Event);
