//! Which broker the simulated coordinator is: the release whose group-coordinator rules it
//! follows ([`BrokerProfile`]), the server-side assignors it offers (`group.consumer.assignors`,
//! [`ServerAssignor`]) and the KIP-848 assignment interval of 4.3+.
//!
//! The differences between releases, each read on the confluentinc/kafka `4.0`, `4.1`, `4.2` and
//! `4.3` branches (`group-coordinator/src/main/java/org/apache/kafka/coordinator/group/`):
//!
//! | rule | 4.0 / 4.1 | 4.2 | 4.3+ |
//! |---|---|---|---|
//! | epoch-0 heartbeat of a registered dynamic member (`GroupMetadataManager.throwIfConsumerGroupMemberEpochIsInvalid`) | accepted only when the member's previous epoch is 0, else FENCED_MEMBER_EPOCH (until the session expires) | always accepted (KAFKA-19233) | same as 4.2 |
//! | leaving UNREVOKED_PARTITIONS (`CurrentAssignmentBuilder.build`) | member epoch + 1 | the member's epoch (KAFKA-19974) | same as 4.2 |
//! | subscription change of a member (`CurrentAssignmentBuilder.build` / `updateCurrentAssignment`, `computeNextAssignment`) | nothing until the next target | unsubscribed topics leave the current assignment at once, also mid-revocation (KAFKA-19431) | same as 4.2 |
//! | a new group's first heartbeat (`GroupMetadataManager.consumerGroupHeartbeat`) | bumps the group epoch from 0 | same as 4.0 | only a subscription change bumps it |
//! | target assignment (`GroupMetadataManager.maybeUpdateTargetAssignment`) | on the heartbeat that finds the group epoch ahead | same | at most once per `group.consumer.assignment.interval.ms` (`canComputeNextTargetAssignment`); meanwhile members reconcile to the last target |
//! | OffsetCommit epoch (`ConsumerGroup.validateOffsetCommit`) | must equal the member epoch | same | equal, or older and not older than each committed partition's assignment epoch (KIP-1251, `createAssignmentEpochValidator`) |

use std::time::Duration;

#[cfg(test)]
mod tests;

/// The broker release whose group-coordinator rules apply (see the module docs for the table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BrokerProfile {
    /// Apache Kafka 4.0 and 4.1.
    Kafka40,
    /// Apache Kafka 4.2.
    Kafka42,
    /// Apache Kafka 4.3 and later.
    Kafka43,
}

impl BrokerProfile {
    /// Every profile, oldest first.
    pub const ALL: [BrokerProfile; 3] = [Self::Kafka40, Self::Kafka42, Self::Kafka43];

    /// KAFKA-19233: an epoch-0 heartbeat always passes the member epoch check (4.2+).
    pub fn rejoin_at_epoch_zero(self) -> bool {
        self >= Self::Kafka42
    }

    /// KAFKA-19431: the current assignment follows a subscription change at once (4.2+).
    pub fn subscription_consistency(self) -> bool {
        self >= Self::Kafka42
    }

    /// KAFKA-19974 absent: leaving UNREVOKED_PARTITIONS bumps the member epoch by one (4.0/4.1).
    pub fn bumps_epoch_after_revocation(self) -> bool {
        self < Self::Kafka42
    }

    /// The first heartbeat of a new group bumps its epoch from 0 (4.0-4.2).
    pub fn bumps_new_group_epoch(self) -> bool {
        self < Self::Kafka43
    }

    /// `group.consumer.assignment.interval.ms` exists (4.3+).
    pub fn has_assignment_interval(self) -> bool {
        self >= Self::Kafka43
    }

    /// KIP-1251: offset commits with an older member epoch are checked per partition (4.3+).
    pub fn per_partition_commit_epochs(self) -> bool {
        self >= Self::Kafka43
    }

    /// A short name for traces.
    pub fn name(self) -> &'static str {
        match self {
            Self::Kafka40 => "4.0/4.1",
            Self::Kafka42 => "4.2",
            Self::Kafka43 => "4.3+",
        }
    }
}

/// A server-side assignor of KIP-848 groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ServerAssignor {
    /// `uniform` (`UniformAssignor`): sticky and balanced, the broker's default.
    Uniform,
    /// `range` (the server-side `RangeAssignor`): contiguous ranges per topic, not sticky.
    Range,
    /// Not a broker assignor: a round robin recomputed from scratch on every target change, so
    /// that partitions move between members far more often than on a broker (a churn mode for
    /// schedules that want many revocations). Opt in by listing it.
    RoundRobin,
}

impl ServerAssignor {
    /// The name a member asks for in `ServerAssignor`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Uniform => "uniform",
            Self::Range => "range",
            Self::RoundRobin => "sim-round-robin",
        }
    }
}

/// The broker's release and group-coordinator settings that differ between releases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRules {
    /// The release.
    pub profile: BrokerProfile,
    /// `group.consumer.assignors` (`uniform,range`): the first is the default; a
    /// `ServerAssignor` not listed is answered UNSUPPORTED_ASSIGNOR.
    pub assignors: Vec<ServerAssignor>,
    /// `group.consumer.assignment.interval.ms` (4.3+; broker default 1000, 0 = on every
    /// heartbeat that finds the group epoch ahead). Ignored before 4.3.
    pub assignment_interval: Duration,
}

impl Default for BrokerRules {
    /// Kafka 4.2 (the rules the scripted scenarios were written against), `uniform,range`.
    fn default() -> Self {
        Self {
            profile: BrokerProfile::Kafka42,
            assignors: vec![ServerAssignor::Uniform, ServerAssignor::Range],
            assignment_interval: Duration::from_millis(1000),
        }
    }
}

impl BrokerRules {
    /// The rules of `profile` with the broker's default assignors and interval.
    pub fn of(profile: BrokerProfile) -> Self {
        Self {
            profile,
            ..Self::default()
        }
    }

    /// The configured assignor named `name`.
    pub fn assignor(&self, name: &str) -> Option<ServerAssignor> {
        self.assignors.iter().copied().find(|a| a.name() == name)
    }

    /// The interval between two target assignments (zero before 4.3).
    pub fn effective_assignment_interval(&self) -> Duration {
        if self.profile.has_assignment_interval() {
            self.assignment_interval
        } else {
            Duration::ZERO
        }
    }
}
