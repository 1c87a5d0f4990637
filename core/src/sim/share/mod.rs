//! A deterministic simulation of KIP-932 share groups: [`ShareConsumer`]s and their
//! applications against a simulated share-group coordinator and share-partition leaders, with
//! seeded faults and virtual time (feature `sim`).
//!
//! [`ShareConsumer`]: crate::machine::share::ShareConsumer
//!
//! What is modelled (each broker rule names the Kafka 4.4 code it follows, in `broker.rs`):
//! - one group coordinator serving ShareGroupHeartbeat v1 (`GroupMetadataManager.
//!   shareGroupHeartbeat`): joins at epoch 0 with the client's member id, the group epoch
//!   bumping on membership and subscription changes, a target from a `SimpleAssignor`-like
//!   non-exclusive assignor (every partition to at least one member), the member epoch set to
//!   the group epoch at once, UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, leaves at -1, session
//!   expiry after 45 s, 5 s heartbeat interval; a coordinator move (the old node answers
//!   NOT_COORDINATOR, the new one COORDINATOR_LOAD_IN_PROGRESS while it loads, FindCoordinator
//!   names the new node);
//! - 1-3 brokers leading one topic's partitions, each a share-partition leader
//!   (`SharePartition`): records acquired by ShareFetch (MaxRecords), a 30 s acquisition lock,
//!   lock expiry back to Available with the delivery count kept, Archived at the delivery
//!   limit (5, `group.share.delivery.count.limit`), ACCEPT / RELEASE / REJECT by offset ranges
//!   piggybacked on ShareFetch or carried by ShareAcknowledge, a partition's acknowledgement
//!   refused whole (INVALID_RECORD_STATE) unless every offset is acquired by the member;
//!   share sessions per (broker, member id) (`SharePartitionManager.newContext`,
//!   `ShareSessionCache`): epoch 0 replaces the member's session (acknowledgements refused
//!   with INVALID_REQUEST), a positive epoch must be the next one (INVALID_SHARE_SESSION_EPOCH
//!   123, SHARE_SESSION_NOT_FOUND 122), -1 applies the acknowledgements, closes the session
//!   and releases its acquired records; a fetch with nothing to return waits MaxWaitMs
//!   (`DelayedShareFetch`); a leader move (the new leader starts from the persisted state, so
//!   records acquired at the old one are Available again; the old leader answers
//!   NOT_LEADER_OR_FOLLOWER with the new leader); Metadata with brokers, topic id and leaders,
//!   FindCoordinator, from any broker;
//! - the network: one connection per (process, target) with requests processed and answered
//!   in order, 1-10 ms latency, seeded slow answers, connection resets before the broker reads
//!   a request or after it processed it (the answer lost), which fail every request in flight
//!   on that connection;
//! - the application of each process: it acknowledges every range it was handed (ACCEPT,
//!   rarely RELEASE), then asks for more ([`fetch_more`]); it sometimes pauses (past the
//!   acquisition lock at times), closes (acknowledging what it holds first) or crashes (its
//!   sessions die with its connections; its records come back when their locks expire); a
//!   restarted process has a new member id.
//!
//! [`fetch_more`]: crate::machine::share::ShareConsumer::fetch_more
//!
//! Invariants ([`world::ShareWorld::violations`], checked as things happen): a heartbeat never
//! carries an empty member id nor an epoch below -1; a process's member id never changes (its
//! heartbeats and share requests all carry the id it started with); records handed to an
//! application were acquired for that member with that delivery count; an acknowledgement
//! reported Ok was applied by a leader (the same member, partition, range and type); no fatal
//! error; no livelock. At the end ([`world::ShareWorld::check_end`]): every record is terminal,
//! none ACCEPTed twice, every ACCEPTed record was handed to an application; records archived at
//! the delivery limit are counted. A record has one acquiring member at a time by construction
//! of the leaders' state.
//!
//! Not modelled: the share coordinator and its persister (the leaders' state is in memory and
//! survives leader moves, acquisitions aside), records that are not consecutive offsets
//! (GAP), MaxBytes and batch sizes, the share-session cache limit, a session released by its
//! connection closing while the process lives on, request timeouts (answers always come
//! within them), bytes of a reset connection still read by the broker, throttling, other
//! group types on the same group id, rack-aware assignment, topic creation and deletion.

pub mod broker;
pub mod world;

pub use broker::{Brokers, RecordState};
pub use world::{ShareSimConfig, ShareWorld, Slot};
