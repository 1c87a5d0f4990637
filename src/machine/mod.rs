//! The sans-IO core: state machines fed with events and an injected `now`, returning the requests
//! to send and the deadlines to wake up at. Nothing here touches a socket, an async runtime, a
//! clock or a global random source; `tests/sans_io_boundary.rs` fails the build if it does.
//!
//! Every machine has the same shape (the drive contract):
//! - inputs: `handle_response(id, result, now)`, `handle_timeout(now)`, commands;
//! - outputs, drained after every input until empty: `poll_request()`, `poll_event()`,
//!   `poll_timeout()`.

pub mod classic;
pub mod consumer;
pub mod coordinator;
pub mod events;
pub mod member;
pub mod metadata;
pub mod offsets;
mod shell;
mod state;
pub mod streams;
pub mod timer;
pub mod topics;

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use crate::error::TransportError;
use crate::request::{Outbound, RequestId, Response};
use timer::Timer;

/// A partition of a topic.
///
/// The name is shared: the partitions of one topic decoded from one message (an assignment, a
/// subscription's owned partitions, a topic id resolved through metadata) point at one copy of
/// it, so a list of partitions costs a few words per partition however long the name is, and
/// cloning a partition never copies its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// The topic name.
    pub topic: Arc<str>,
    /// The partition index.
    pub partition: i32,
}

impl TopicPartition {
    /// `topic`-`partition`. The name may be a `&str`, `String`, `&String` or `Arc<str>`; pass an
    /// `Arc<str>` (or `&Arc<str>`) to share one name among partitions.
    pub fn new(topic: impl IntoTopicName, partition: i32) -> Self {
        Self {
            topic: topic.into_topic_name(),
            partition,
        }
    }

    /// The topic name.
    pub fn topic(&self) -> &str {
        &self.topic
    }
}

/// What [`TopicPartition::new`] takes as a topic name.
pub trait IntoTopicName {
    /// The name, shared if it already was.
    fn into_topic_name(self) -> Arc<str>;
}

impl IntoTopicName for Arc<str> {
    fn into_topic_name(self) -> Arc<str> {
        self
    }
}

impl IntoTopicName for &Arc<str> {
    fn into_topic_name(self) -> Arc<str> {
        Arc::clone(self)
    }
}

impl IntoTopicName for &str {
    fn into_topic_name(self) -> Arc<str> {
        self.into()
    }
}

impl IntoTopicName for String {
    fn into_topic_name(self) -> Arc<str> {
        self.into()
    }
}

impl IntoTopicName for &String {
    fn into_topic_name(self) -> Arc<str> {
        self.as_str().into()
    }
}

impl IntoTopicName for Box<str> {
    fn into_topic_name(self) -> Arc<str> {
        self.into()
    }
}

impl IntoTopicName for std::borrow::Cow<'_, str> {
    fn into_topic_name(self) -> Arc<str> {
        self.into()
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

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
machine!(streams::StreamsMember, streams::StreamsEvent);
machine!(topics::TopicWatch, events::Event);
