//! The base instant of the sans-IO core's unit tests, read once per test process.

use std::sync::OnceLock;
use std::time::Instant;

/// The instant the first caller in this process asked for; every later call returns the same.
pub fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}
