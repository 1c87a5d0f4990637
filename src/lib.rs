//! Client-side Kafka consumer-group membership.
//!
//! `consumer-membership` joins, heartbeats in, and leaves Kafka consumer groups for Rust consumers
//! that bring their own fetch path: the classic protocol with static membership that keeps its
//! member id when it skips LeaveGroup, and the KIP-848 consumer protocol with a client-generated
//! member id (KIP-1082).
//!
//! The crate has three layers:
//! - [`machine`]: sans-IO state machines. They are fed responses, timer ticks and an injected `now`,
//!   and return requests to send and deadlines. No sockets, clocks, runtimes or global RNG.
//! - [`transport`]: the [`Transport`](transport::Transport) trait, a tokio TCP implementation of
//!   the Kafka wire protocol and an in-memory one.
//! - [`driver`]: runs a core machine over a transport on tokio.
//!
//! ```no_run
//! # async fn demo() -> Result<(), consumer_membership::Error> {
//! use std::sync::Arc;
//! use consumer_membership::{ClientConfig, driver, transport::TcpTransport};
//!
//! let config = ClientConfig::new("127.0.0.1:9092")?;
//! let transport = Arc::new(TcpTransport::new(config.clone()));
//! let coordinator = driver::find_coordinator(&transport, &config, "my-group").await?;
//! println!("coordinator: {coordinator}");
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backoff;
pub mod config;
#[cfg(feature = "tokio")]
pub mod driver;
pub mod error;
pub mod machine;
pub mod member_id;
#[cfg(feature = "tokio")]
pub mod metrics;
pub mod properties;
pub mod request;
#[cfg(feature = "sim")]
pub mod sim;
pub mod transport;

pub use config::ClientConfig;
pub use error::{ConfigError, Error, GroupError, TransportError};
pub use member_id::MemberId;

#[cfg(test)]
pub(crate) mod testutil {
    /// A base instant for tests of the sans-IO core, which may not read the clock itself.
    pub(crate) fn epoch() -> std::time::Instant {
        std::time::Instant::now()
    }
}
