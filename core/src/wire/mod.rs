//! Everything that goes on the wire and how it is read back: the requests the machines want sent
//! and the answers they are handed ([`request`]), the Kafka messages the pinned `kafka-protocol`
//! lacks ([`messages`]), the consumer-protocol bytes classic members exchange in JoinGroup and
//! SyncGroup ([`subscription`]), framing and version negotiation (this module's functions), and the
//! bounded decoding that every answer passes before `kafka-protocol` allocates for it (`layout`:
//! the size walk of each response, `bounded`: the walk itself, shared with the consumer-protocol
//! bytes of [`subscription`]).

pub(crate) mod bounded;
mod frame;
mod layout;
pub mod messages;
pub mod request;
pub mod subscription;

pub use frame::*;
