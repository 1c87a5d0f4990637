//! The states a member goes through and the reasons it gives for its state changes and lost
//! partitions, as [`Event::StateChanged`](super::events::Event::StateChanged) and
//! [`Event::Lost`](super::events::Event::Lost) carry them.
//!
//! Both are `#[non_exhaustive]`: match the variants you act on and keep a wildcard arm. Their
//! [`Display`](std::fmt::Display) (and `as_str`) is the text logs and simulation traces show.

use std::fmt;

/// Defines a fieldless enum whose variants each have a fixed text, with `as_str` and a
/// `Display` printing that text.
macro_rules! named {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $($(#[$doc:meta])* $variant:ident => $text:literal,)*
        }
    ) => {
        $(#[$meta])*
        pub enum $name {
            $($(#[$doc])* $variant,)*
        }

        impl $name {
            /// The text logs and traces show.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(self.as_str())
            }
        }
    };
}

named! {
    /// Where a member stands: the phases of both protocols' members (each member uses those its
    /// protocol has), plus the two names of the `group.protocol=auto` fallback. A new member
    /// is `Unsubscribed` (the default).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    #[non_exhaustive]
    pub enum MemberState {
        /// No subscription; not trying to be in the group.
        #[default]
        Unsubscribed => "Unsubscribed",
        /// Classic: wants to (re)join once the coordinator is known and any backoff passed.
        Rejoin => "Rejoin",
        /// Revoked partitions are with the application until it hands the ticket back.
        AwaitRevoke => "AwaitRevoke",
        /// Classic: JoinGroup in flight; consumer: epoch-0 heartbeats until answered.
        Joining => "Joining",
        /// Classic leader: fetching the members' topic metadata to compute the assignment.
        Assigning => "Assigning",
        /// Classic: SyncGroup in flight.
        Syncing => "Syncing",
        /// Consumer: applying the target assignment (waiting for topic metadata or a heartbeat).
        Reconciling => "Reconciling",
        /// Consumer: the next heartbeat acknowledges the new assignment.
        Acknowledging => "Acknowledging",
        /// In the group with its assignment.
        Stable => "Stable",
        /// Classic: the application missed `max.poll.interval.ms`; its next poll rejoins.
        PollExpired => "PollExpired",
        /// Consumer: left on poll timeout; the next poll rejoins.
        Stale => "Stale",
        /// Leaving the group (LeaveGroup or leave heartbeat due or in flight).
        Leaving => "Leaving",
        /// Closed by the application.
        Closed => "Closed",
        /// Stopped by a terminal error.
        Fatal => "Fatal",
        /// `group.protocol=auto`: the consumer-protocol member, before the fallback.
        Consumer => "Consumer",
        /// `group.protocol=auto`: the classic member that replaced it.
        Classic => "Classic",
    }
}

named! {
    /// Why a member changed state or lost its partitions.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    pub enum Reason {
        /// The application subscribed.
        Subscribed => "subscribed",
        /// The subscription of a stable classic member changed.
        SubscriptionChanged => "subscription changed",
        /// The application unsubscribed.
        Unsubscribed => "unsubscribed",
        /// The application subscribed again while a leave was under way.
        Resubscribed => "resubscribed",
        /// The application closed the member.
        Closed => "closed",
        /// The application missed `max.poll.interval.ms`.
        PollTimeout => "poll timeout",
        /// The application polled again after a poll timeout.
        PolledAfterPollTimeout => "polled again after poll timeout",
        /// The application handed the revocation ticket back.
        RevocationCompleted => "revocation completed",
        /// The application did not hand the revocation ticket back within `max.poll.interval.ms`.
        RevocationTicketNotHandedBack => "revocation ticket not handed back",
        /// A close waited for the revocation ticket, which came back.
        ClosedAfterRevocation => "closed after the revocation completed",
        /// An unsubscribe waited for the revocation ticket, which came back.
        UnsubscribedAfterRevocation => "unsubscribed after the revocation completed",
        /// A close waited for the revocation ticket, which did not come back in time.
        ClosedWithoutTicket => "closed without the revocation ticket",
        /// An unsubscribe waited for the revocation ticket, which did not come back in time.
        UnsubscribedWithoutTicket => "unsubscribed without the revocation ticket",
        /// A close waited for a revocation that being replaced voided.
        ClosedAfterReplaced => "closed after being replaced",
        /// An unsubscribe waited for a revocation that being replaced voided.
        UnsubscribedAfterReplaced => "unsubscribed after being replaced",
        /// Classic: a JoinGroup went out.
        SendingJoinGroup => "sending JoinGroup",
        /// Classic: a SyncGroup went out.
        SendingSyncGroup => "sending SyncGroup",
        /// Classic leader: computing the assignment.
        LeaderAssigning => "leader assigning",
        /// Classic: the SyncGroup answer brought the assignment.
        SyncGroupAnswered => "SyncGroup answered",
        /// Classic: the new assignment takes partitions away (cooperative protocol).
        CooperativeRevocation => "cooperative revocation",
        /// Classic leader: the subscribed topics' partitions changed.
        MetadataChanged => "metadata changed",
        /// Classic: the JoinGroup failed in the transport; rejoin after a backoff.
        JoinGroupTransportFailure => "JoinGroup failed in the transport",
        /// Classic: the SyncGroup failed in the transport; rejoin after a backoff.
        SyncGroupTransportFailure => "SyncGroup failed in the transport",
        /// Classic: a retriable JoinGroup error; rejoin after a backoff.
        RetriableJoinGroupError => "retriable JoinGroup error",
        /// Classic: a retriable SyncGroup error; rejoin after a backoff.
        RetriableSyncGroupError => "retriable SyncGroup error",
        /// Classic: another SyncGroup error that calls for a rejoin.
        SyncGroupRejoin => "SyncGroup: rejoin",
        /// Classic: the leader's assignment names a topic Kafka cannot have or a negative
        /// partition; it is refused and the member rejoins.
        InvalidAssignment => "invalid assignment refused",
        /// Classic leader: the topic metadata for the assignment could not be fetched.
        LeaderMetadataFailed => "leader metadata failed",
        /// Classic: the coordinator answered that it is not (or no longer) the group's
        /// coordinator; look it up again and rejoin after a backoff.
        CoordinatorMoved => "coordinator moved",
        /// Classic: the coordinator became unknown before the next request could go out.
        CoordinatorLost => "coordinator lost",
        /// Classic: the JoinGroup answer asks for a second join with the member id it assigned.
        MemberIdRequired => "MEMBER_ID_REQUIRED",
        /// The coordinator does not know the member id: fenced, partitions lost.
        UnknownMemberId => "UNKNOWN_MEMBER_ID",
        /// Classic: the generation ended without the member: fenced, partitions lost.
        IllegalGeneration => "ILLEGAL_GENERATION",
        /// Consumer: the member epoch is stale: fenced, partitions lost.
        FencedMemberEpoch => "FENCED_MEMBER_EPOCH",
        /// Classic: a rebalance started; the member rejoins.
        RebalanceInProgress => "REBALANCE_IN_PROGRESS",
        /// Classic: a commit answered REBALANCE_IN_PROGRESS; the member rejoins.
        CommitRebalanceInProgress => "commit: REBALANCE_IN_PROGRESS",
        /// Classic: the JoinGroup answer skipped generations; what the member owned may be
        /// another member's now.
        MissedGenerations => "generations went by without this member",
        /// Classic static member: a coordinator that loaded an older registration fenced it.
        FencedByOlderRegistration => "fenced by a coordinator that loaded an older registration",
        /// Classic static member: its own earlier JoinGroup replaced its member id.
        ReplacedByOwnJoin => "replaced by this member's own earlier JoinGroup",
        /// Classic static member: rejoining with its instance id after being replaced.
        SelfFenced => "self-fenced",
        /// Classic: the LeaveGroup went out and its answer (or failure) came back.
        LeaveGroupSent => "LeaveGroup sent",
        /// Consumer: the leave heartbeat was answered (or was not due).
        Left => "left",
        /// Consumer: left the group because of a poll timeout.
        LeftOnPollTimeout => "left on poll timeout",
        /// Consumer static member: UNRELEASED_INSTANCE_ID answered its join; its partitions are
        /// lost.
        UnreleasedInstanceId => "UNRELEASED_INSTANCE_ID",
        /// Consumer static member: leaving to release its instance id, then rejoining.
        UnreleasedInstanceIdRecovery => "UNRELEASED_INSTANCE_ID recovery",
        /// Consumer static member: rejoining after it released its instance id.
        RejoinAfterInstanceRelease => "rejoin after releasing the instance id",
        /// Consumer: the first heartbeat answer made the member part of the group.
        Joined => "joined",
        /// Consumer: the new assignment takes partitions away.
        Revoking => "revoking",
        /// Consumer: the assignment is applied once the heartbeat in flight is answered.
        AwaitingHeartbeat => "waiting for the heartbeat in flight",
        /// Consumer: the assignment is applied once topic metadata names its topic ids.
        AwaitingTopicMetadata => "waiting for topic metadata",
        /// Consumer: the next heartbeat acknowledges the new assignment.
        AcknowledgingAssignment => "acknowledging the assignment",
        /// Consumer: the assignment is applied and acknowledged.
        AssignmentReconciled => "assignment reconciled",
        /// Streams: another member of this process still holds an assigned task.
        TaskWithheld => "waiting for another member of this process to release a task",
        /// No heartbeat sent within the session timeout less one heartbeat interval was
        /// answered: the coordinator may have expired the member and given its partitions away
        /// (the membership lease, see [`crate::machine`]). The member keeps its member id and
        /// rejoins once the coordinator answers again.
        LeaseExpired => "membership lease expired",
        /// The member stopped on a terminal error (see `Event::Fatal`).
        FatalError => "fatal error",
        /// `group.protocol=auto`: the broker refused the consumer protocol; classic takes over.
        ConsumerProtocolRefused => "broker refused the consumer protocol (group.protocol=auto)",
    }
}

impl Reason {
    /// The member was fenced out of the group and rejoins: its member id, generation or epoch
    /// is no longer valid (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_MEMBER_EPOCH), or a
    /// static member was replaced under its instance id (`SelfFenced`).
    pub const fn is_fencing(self) -> bool {
        matches!(
            self,
            Reason::UnknownMemberId
                | Reason::IllegalGeneration
                | Reason::FencedMemberEpoch
                | Reason::SelfFenced
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_prints_the_text_and_honours_padding() {
        assert_eq!(MemberState::AwaitRevoke.to_string(), "AwaitRevoke");
        assert_eq!(format!("{:>8}|", MemberState::Stable), "  Stable|");
        assert_eq!(Reason::SelfFenced.to_string(), "self-fenced");
        assert_eq!(
            Reason::CommitRebalanceInProgress.as_str(),
            "commit: REBALANCE_IN_PROGRESS"
        );
    }

    #[test]
    fn group_protocol_displays_its_config_value() {
        use crate::config::GroupProtocol;
        assert_eq!(GroupProtocol::Classic.to_string(), "classic");
        assert_eq!(GroupProtocol::Consumer.to_string(), "consumer");
        assert_eq!(GroupProtocol::Auto.as_str(), "auto");
    }

    #[test]
    fn fencing_reasons() {
        assert!(Reason::FencedMemberEpoch.is_fencing());
        assert!(Reason::SelfFenced.is_fencing());
        assert!(!Reason::PollTimeout.is_fencing());
        assert!(!Reason::RebalanceInProgress.is_fencing());
    }
}
