//! Deterministic simulation: a simulated group coordinator, a network that behaves like a Kafka
//! broker's, and virtual time (feature `sim`).
//!
//! The pieces, from the inside out:
//! - [`coordinator::SimCoordinator`]: a sans-IO group coordinator that takes decoded requests at
//!   their version and answers them at once or later (parked JoinGroup / SyncGroup, writes that
//!   wait for their append). Every rule names the broker method it models (apache/kafka
//!   `GroupMetadataManager`, `ClassicGroup`, `GroupCoordinatorService`, `OffsetMetadataManager`);
//!   the rules are split by protocol (`coordinator/classic.rs`, `offsets.rs`, `consumer.rs`).
//! - [`network::Network`]: client connections as a broker sees them: at most one request per
//!   connection read and in flight, the next one read only after the answer went out; the
//!   coordinator works through a queue ordered by read time; stalls; bytes a client already
//!   delivered on a connection it then closed are still read and processed (their answers are
//!   dropped); seeded delays, drops and duplicates of answers.
//! - [`world::World`]: members (anything implementing [`world::SimMember`], e.g.
//!   [`ClassicMember`](crate::machine::classic::ClassicMember) or
//!   [`Member`](crate::machine::member::Member), and streams members through
//!   [`streams_member::SimStreamsMember`]), the coordinator, the network and a virtual clock that
//!   jumps to the next deadline. One `step()` is one delivered frame, read, processed request,
//!   answer or timer; the trace has one line per step and replays identically from the seed.
//!   The invariants it checks after every step ([`world::World::violations`]) are in
//!   `core/src/sim/invariants.rs`.
//!
//! ```no_run
//! use std::time::{Duration, Instant};
//! use consumer_membership_core::config::GroupConfig;
//! use consumer_membership_core::machine::events::MemberState;
//! use consumer_membership_core::sim::world::{SimConfig, World};
//!
//! # fn run(start: Instant) {
//! // `start`: the origin of virtual time (the application's clock read; the core reads none).
//! let mut world = World::new(SimConfig::new(7).with_topic("t", 4), start);
//! let mut config = GroupConfig::new("g").with_instance_id("i1");
//! config.session_timeout = Duration::from_secs(10);
//! config.heartbeat_interval = Duration::from_secs(1);
//! let m = world.add_classic("m1", config, |_| {}).unwrap();
//! world.subscribe(m, &["t"]);
//! assert!(world.run_until(|w| w.member(m).state() == MemberState::Stable, Duration::from_secs(30)));
//! # }
//! ```

pub mod coordinator;
mod invariants;
pub mod network;
pub mod share;
pub mod streams_member;
pub mod world;

use std::fmt;

/// A client connection as the broker knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u64);

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "c{}", self.0)
    }
}

/// Kafka error codes the simulation produces: the crate's one list ([`crate::error::codes`]).
pub use crate::error::codes;
