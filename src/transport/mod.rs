//! The pluggable seam between the driver and the network. The sans-IO core never sees a
//! transport: it emits [`Outbound`](crate::request::Outbound) values and is handed
//! [`Response`]s.
//!
//! - [`TcpTransport`] (feature `tokio`): the Kafka wire protocol over tokio TCP.
//! - [`MemoryTransport`] (feature `sim`): an in-process peer for tests, which still encodes and
//!   decodes every request and response at the negotiated version.

#[cfg(feature = "tokio")]
mod conn;
#[cfg(feature = "sim")]
mod memory;
#[cfg(feature = "tokio")]
mod sasl;
#[cfg(feature = "tokio")]
mod tcp;
#[cfg(feature = "tls")]
mod tls;

use std::future::Future;
use std::time::Duration;

#[cfg(feature = "sim")]
pub use memory::{Handler, MemoryTransport};
#[cfg(feature = "tokio")]
pub use tcp::TcpTransport;
#[cfg(feature = "tls")]
pub use tls::tls_client_config;

// The client's connection rules and the wire codec live in the sans-IO core (documented there:
// `consumer_membership_core::{connections, wire}`); these paths serve the tests, the fuzz
// targets and the model checker.
#[doc(hidden)]
pub use consumer_membership_core::connections;
#[doc(hidden)]
pub use consumer_membership_core::wire;

use crate::error::TransportError;
use crate::request::{Request, Response, Target};

/// Sends requests to Kafka brokers.
pub trait Transport: Send + Sync + 'static {
    /// Sends `request` to `target` at the highest version both sides speak and resolves to its
    /// answer, or a typed error within `timeout` (connecting included).
    fn send(
        &self,
        target: Target,
        request: Request,
        timeout: Duration,
    ) -> impl Future<Output = Result<Response, TransportError>> + Send;
}

impl<T: Transport> Transport for std::sync::Arc<T> {
    fn send(
        &self,
        target: Target,
        request: Request,
        timeout: Duration,
    ) -> impl Future<Output = Result<Response, TransportError>> + Send {
        (**self).send(target, request, timeout)
    }
}

/// `now + d`, saturating as [`crate::machine::timer::after`] does: a caller's `Duration::MAX`
/// timeout is a deadline far away, not an overflow.
#[cfg(feature = "tokio")]
pub(crate) fn later(now: tokio::time::Instant, d: Duration) -> tokio::time::Instant {
    tokio::time::Instant::from_std(crate::machine::timer::after(now.into_std(), d))
}
