//! The classic group protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup) with static
//! membership.

pub mod assignor;
mod member;
pub mod subscription;

pub use member::ClassicMember;

#[cfg(test)]
mod tests;
