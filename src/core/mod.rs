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
pub mod timer;

use std::fmt;
use std::time::Instant;

use crate::error::TransportError;
use crate::request::{Outbound, RequestId, Response};

/// A partition of a topic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// The topic name.
    pub topic: String,
    /// The partition index.
    pub partition: i32,
}

impl TopicPartition {
    /// `topic`-`partition`.
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// A sans-IO machine a driver can run over a transport.
pub trait Machine {
    /// The next request to send, if any. Drain until `None` after every input.
    fn poll_request(&mut self) -> Option<Outbound>;
    /// When the machine next wants [`handle_timeout`](Machine::handle_timeout) called.
    fn poll_timeout(&self) -> Option<Instant>;
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

impl Machine for coordinator::CoordinatorLookup {
    fn poll_request(&mut self) -> Option<Outbound> {
        coordinator::CoordinatorLookup::poll_request(self)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        coordinator::CoordinatorLookup::poll_timeout(self).map(|(at, _)| at)
    }
    fn handle_response(
        &mut self,
        id: RequestId,
        result: Result<Response, TransportError>,
        now: Instant,
    ) {
        coordinator::CoordinatorLookup::handle_response(self, id, result, now)
    }
    fn handle_timeout(&mut self, now: Instant) {
        coordinator::CoordinatorLookup::handle_timeout(self, now)
    }
}
