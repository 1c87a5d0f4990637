//! The sans-IO core of [`consumer-membership`](https://docs.rs/consumer-membership): Kafka group
//! membership as state machines, with no runtime, no socket and no clock.
//!
//! Every machine is fed events (answers to its requests, timer deadlines, the user's calls, each
//! with the `Instant` it happens at) and returns what to do: the requests to send, the events to
//! report and its next deadline. It reads no clock, opens no connection and draws no randomness of
//! its own (a seed and a member id come in through [`GroupConfig`]); all of
//! the membership's policy (retries, the KIP-580 backoff, the leave and its outcome, the lease)
//! lives here, so every way of running a machine gets the same behaviour. The crate's
//! `clippy.toml` forbids clock reads and OS random draws, and its manifest has no runtime or
//! socket crate.
//!
//! Most applications use `consumer-membership`, which re-exports this crate and adds a tokio
//! driver and a TCP/TLS/SASL transport. Use this crate alone to run the machines on a runtime of
//! your own.
//!
//! - [`machine`]: the state machines (classic, KIP-848 consumer, KIP-1071 streams) and their
//!   events; their module docs hold the state diagrams and the identity rules;
//! - [`wire`]: what the machines send and are answered ([`request`], re-exported at the root as
//!   it always was, like [`messages`]), and its encoding at the negotiated versions, with bounded
//!   decoding of every answer;
//! - [`connections`]: the client's connection rules (one request in flight per connection, what
//!   a reset takes with it), shared by every transport;
//! - [`assignor`]: the classic protocol's client-side assignors (range, round-robin,
//!   cooperative-sticky) and the trait for your own;
//! - [`config`], [`error`], [`member_id`], [`backoff`], [`properties`];
//! - [`sim`] (feature `sim`): the deterministic simulation (a simulated coordinator, network and
//!   virtual time) the machines are tested in.

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod assignor;
pub mod backoff;
pub mod config;
pub mod connections;
pub mod error;
pub mod machine;
pub mod member_id;
mod partition;
pub mod properties;
#[cfg(feature = "sim")]
pub mod sim;
pub mod wire;

pub use wire::{messages, request};

pub use config::{ClientConfig, GroupConfig, GroupProtocol};
pub use error::{ApiMisuse, ConfigError, Error, GroupError, TransportError};
/// The Kafka protocol types of the version this crate speaks.
pub use kafka_protocol;
pub use machine::events::{
    CloseOptions, CloseOutcome, CommitError, CommitOffset, CommittedOffset, Event, MemberState,
    Reason, RevokeTicket,
};
pub use member_id::MemberId;
pub use partition::{IntoTopicName, TopicPartition};

#[cfg(test)]
pub(crate) mod testutil {
    /// A base instant for tests of the sans-IO core, which reads no clock itself: the
    /// test-only crate `test-clock` (a dev-dependency) reads it once.
    pub(crate) fn epoch() -> std::time::Instant {
        test_clock::origin()
    }

    /// Asserts that the first of `events` is an [`Event::Lost`](crate::Event::Lost) for the
    /// membership lease: a member driven again after a stall reports it before anything else.
    pub(crate) fn assert_lease_lost_first(events: &[crate::Event]) {
        assert!(
            matches!(
                events.first(),
                Some(crate::Event::Lost {
                    reason: crate::Reason::LeaseExpired,
                    ..
                })
            ),
            "the lease's Lost comes first: {events:?}"
        );
    }
}
