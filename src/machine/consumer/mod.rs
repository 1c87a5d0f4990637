//! The KIP-848 consumer group protocol (ConsumerGroupHeartbeat).

mod member;

pub use member::{ConsumerMember, UNRELEASED_RECOVERIES};

#[cfg(test)]
mod tests;
