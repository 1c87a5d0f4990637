//! The manual: how membership behaves, how it is tested and measured, and what is where.
//!
//! The README is the front door (what the crate is, the two commands, the event loop); this
//! module holds the rest. Its pages are the markdown files under `doc/manual/` (readable on their
//! own in the repository), and their Rust blocks compile and run as doctests.
//!
//! Membership:
//!
//! - [`identity`]: the identity rules of each member and the contract that drives the core.
//! - [`lease`]: the membership lease; measured against the Java client.
//! - [`streams`]: streams groups (KIP-1071), the per-process task guard (KAFKA-21401), compared
//!   with Kafka Streams.
//! - [`share`]: share groups (KIP-932), the share sessions, beside Java's `KafkaShareConsumer`.
//! - [`rskafka`]: pairing with rskafka for the records; measured against the crate's own fetch.
//!
//! Setup:
//!
//! - [`configuration`]: configuration by Kafka's names, metrics, the examples, Cargo features.
//! - [`security`]: TLS and SASL.
//!
//! Tests and figures:
//!
//! - [`simulation`]: the deterministic simulation (feature `sim`) and the tests that run on it.
//! - [`real_broker`]: tests against a real broker, the Kafka version matrix, coordinator crashes
//!   with default timeouts.
//! - [`benchmarks`]: rejoin latency against other clients and the wire floor; scale.
//!
//! Inside the crate:
//!
//! - [`architecture`]: what is where, piece by piece; the streams-group messages.
//! - [`dependencies`]: what the crate depends on and why, and how it bounds what kafka-protocol
//!   decodes.

#[doc = include_str!("../doc/manual/identity.md")]
pub mod identity {}

#[doc = include_str!("../doc/manual/lease.md")]
pub mod lease {}

#[doc = include_str!("../doc/manual/streams.md")]
pub mod streams {}

#[doc = include_str!("../doc/manual/share.md")]
pub mod share {}

#[doc = include_str!("../doc/manual/rskafka.md")]
pub mod rskafka {}

#[doc = include_str!("../doc/manual/configuration.md")]
pub mod configuration {}

#[doc = include_str!("../doc/manual/security.md")]
pub mod security {}

#[doc = include_str!("../doc/manual/simulation.md")]
pub mod simulation {}

#[doc = include_str!("../doc/manual/real_broker.md")]
pub mod real_broker {}

#[doc = include_str!("../doc/manual/benchmarks.md")]
pub mod benchmarks {}

#[doc = include_str!("../doc/manual/architecture.md")]
pub mod architecture {}

#[doc = include_str!("../doc/manual/dependencies.md")]
pub mod dependencies {}
