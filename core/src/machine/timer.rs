//! Named deadlines. A state machine keeps its timers in one table; the driver asks for the
//! earliest and calls `handle_timeout(now)` when it passes. Spurious wakeups are harmless: a
//! timer fires only once its deadline is reached.

use std::time::Instant;

/// Why the core wants to be woken up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Timer {
    /// Retry a failed coordinator lookup (KIP-580 backoff).
    CoordinatorRetry,
    /// Send the next heartbeat (`heartbeat.interval.ms`, or the backoff after a failure).
    Heartbeat,
    /// No heartbeat succeeded for `session.timeout.ms`: the coordinator is treated as unknown.
    Session,
    /// The application did not poll within `max.poll.interval.ms`.
    PollInterval,
    /// A (re)join waits: backoff after a retriable error, or a quarantine.
    Rejoin,
    /// The leader checks whether the subscribed topics' partitions changed.
    MetadataRefresh,
    /// A [`TopicWatch`](super::topics::TopicWatch) checks that the subscribed topics exist.
    TopicCheck,
    /// A streams member asks its process's task guard again for the tasks it withholds, or
    /// gives up a task another member of its process was assigned as active.
    TaskGuard,
    /// The membership lease runs out: no heartbeat sent within the session timeout less one
    /// heartbeat interval was answered, so the coordinator may have expired the member and given
    /// its partitions away (see [`crate::machine`], "The membership lease").
    Lease,
    /// The member has waited `default.api.timeout.ms` to become a member (subscribed, not yet
    /// in the group): the application is told why ([`Event::NotJoined`]).
    ///
    /// [`Event::NotJoined`]: crate::machine::events::Event::NotJoined
    NotJoined,
    /// A commit or offset fetch may go out again after its backoff, or its call ran out of
    /// `default.api.timeout.ms` ([`CommitError::TimedOut`]).
    ///
    /// [`CommitError::TimedOut`]: crate::machine::events::CommitError::TimedOut
    Offsets,
    /// A share session may send again after its backoff (a failed ShareFetch).
    ShareFetch,
}

impl Timer {
    const ALL: [Timer; 12] = [
        Timer::CoordinatorRetry,
        Timer::Heartbeat,
        Timer::Session,
        Timer::PollInterval,
        Timer::Rejoin,
        Timer::MetadataRefresh,
        Timer::TopicCheck,
        Timer::TaskGuard,
        Timer::Lease,
        Timer::NotJoined,
        Timer::Offsets,
        Timer::ShareFetch,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// One optional deadline per [`Timer`].
#[derive(Debug, Clone, Default)]
pub(crate) struct TimerTable {
    deadlines: [Option<Instant>; Timer::ALL.len()],
}

impl TimerTable {
    /// Arms `timer` to fire at `at`, replacing an earlier setting.
    pub(crate) fn set(&mut self, timer: Timer, at: Instant) {
        self.deadlines[timer.index()] = Some(at);
    }

    /// Disarms `timer`.
    pub(crate) fn stop(&mut self, timer: Timer) {
        self.deadlines[timer.index()] = None;
    }

    /// The deadline of `timer`, if armed.
    pub(crate) fn get(&self, timer: Timer) -> Option<Instant> {
        self.deadlines[timer.index()]
    }

    /// The earliest armed deadline and its timer.
    pub(crate) fn next(&self) -> Option<(Instant, Timer)> {
        self.next_where(|_| true)
    }

    /// The earliest armed deadline among the timers `keep` accepts. Filtering before taking the
    /// minimum matters: an armed timer that does not count now must not hide one that does.
    pub(crate) fn next_where(&self, keep: impl Fn(Timer) -> bool) -> Option<(Instant, Timer)> {
        Timer::ALL
            .iter()
            .filter(|&&t| keep(t))
            .filter_map(|&t| self.get(t).map(|at| (at, t)))
            .min()
    }

    /// Disarms and returns `timer` if its deadline is at or before `now`.
    pub(crate) fn expire(&mut self, timer: Timer, now: Instant) -> bool {
        match self.get(timer) {
            Some(at) if at <= now => {
                self.stop(timer);
                true
            }
            _ => false,
        }
    }
}

/// `now + d`, saturating: a duration no clock can reach (`Duration::MAX` as a timeout, say)
/// gives a deadline far in the future instead of overflowing. Every deadline a configured or
/// caller-given duration sets goes through here.
pub fn after(now: Instant, d: std::time::Duration) -> Instant {
    /// About a century: later than any member lives, early enough for every platform's clock.
    const FAR: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 24 * 3600);
    now.checked_add(d)
        .or_else(|| now.checked_add(FAR))
        .unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn fires_only_when_due() {
        let t0 = crate::testutil::epoch();
        let mut table = TimerTable::default();
        assert_eq!(table.next(), None);
        table.set(Timer::CoordinatorRetry, t0 + Duration::from_millis(100));
        assert_eq!(
            table.next(),
            Some((t0 + Duration::from_millis(100), Timer::CoordinatorRetry))
        );
        assert!(!table.expire(Timer::CoordinatorRetry, t0 + Duration::from_millis(99)));
        assert!(table.expire(Timer::CoordinatorRetry, t0 + Duration::from_millis(100)));
        assert!(!table.expire(Timer::CoordinatorRetry, t0 + Duration::from_millis(200)));
        assert_eq!(table.next(), None);
    }

    #[test]
    fn an_ignored_early_timer_does_not_hide_a_later_one() {
        let t0 = crate::testutil::epoch();
        let mut table = TimerTable::default();
        table.set(Timer::Heartbeat, t0 + Duration::from_millis(10));
        table.set(Timer::Rejoin, t0 + Duration::from_millis(500));
        assert_eq!(table.next().map(|(_, t)| t), Some(Timer::Heartbeat));
        assert_eq!(
            table.next_where(|t| t != Timer::Heartbeat),
            Some((t0 + Duration::from_millis(500), Timer::Rejoin))
        );
    }
}
