//! Client-side partition assignors for the classic protocol: the group leader runs one over every
//! member's [`Subscription`] and sends each member its share in SyncGroup.
//!
//! The names match Java's, so a group can mix this client with Java (or librdkafka) consumers:
//! [`Range`] (`"range"`), [`RoundRobin`] (`"roundrobin"`) and [`CooperativeSticky`]
//! (`"cooperative-sticky"`). Every assignor is deterministic: the same input gives the same output,
//! whatever order the members come in.
//!
//! Common input rules (as Java's `AbstractPartitionAssignor.assign`): a subscribed topic missing
//! from the partition counts, or with no partitions, is skipped; a member id that appears twice is
//! taken once (its first entry).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::partition::TopicPartition;
use crate::wire::subscription::Subscription;

mod cooperative_sticky;
mod range;
mod round_robin;
#[cfg(test)]
mod test_support;

pub use cooperative_sticky::CooperativeSticky;
pub use range::Range;
pub use round_robin::RoundRobin;

/// How a member gives up partitions during a rebalance (Java's
/// `ConsumerPartitionAssignor.RebalanceProtocol`; ordered `Eager < Cooperative` like Java's enum,
/// so the highest protocol all members support is the `max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum RebalanceProtocol {
    /// Every member revokes all its partitions before joining.
    Eager,
    /// Members keep their partitions while rebalancing and revoke only those the new assignment
    /// takes away (KIP-429); a moved partition reaches its new owner one rebalance later.
    Cooperative,
}

/// One member of the group as the leader's assignor sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberMetadata {
    /// The member id the coordinator gave the member.
    pub member_id: String,
    /// The member's `group.instance.id` when it is a static member (KIP-345).
    pub instance_id: Option<String>,
    /// What the member sent in JoinGroup for this assignor.
    pub subscription: Subscription,
}

/// A partition assignment strategy of the classic protocol, run by the group leader.
///
/// The built-ins are [`Range`], [`RoundRobin`] and [`CooperativeSticky`]; an application may bring
/// its own and list it in [`GroupConfig::assignors`](crate::config::GroupConfig::assignors)
/// (`partition.assignment.strategy`) beside or instead of them. The KIP-848 consumer protocol
/// assigns on the broker and never calls an `Assignor` (see `group.remote.assignor`).
///
/// **How it is used.** Every member offers each of its configured assignors in its JoinGroup, by
/// [`name`](Self::name), preferred first, each with the member's [`Subscription`] as metadata.
/// The coordinator picks one name that every member offers and elects a leader. The leader reads
/// the partition counts of all subscribed topics (a Metadata request) and calls
/// [`assign`](Self::assign) of its assignor of that name once per rebalance; it sends each member
/// its share in SyncGroup, as is (the member does not check or fix up the result).
///
/// **Names.** The name is the protocol name in JoinGroup, so members of one group must use the
/// same name for the same strategy, and a name must denote one strategy: the built-ins use Java's
/// names (`"range"`, `"roundrobin"`, `"cooperative-sticky"`) so a group can mix this client with
/// Java (or librdkafka) consumers. A member's assignors must have distinct, non-empty names
/// ([`GroupConfig::validate`](crate::config::GroupConfig::validate) refuses duplicates); pick a
/// name of your own for your own strategy rather than one of the built-in names.
///
/// **Rebalance protocol.** [`protocol`](Self::protocol) says how members give up partitions:
/// - [`RebalanceProtocol::Eager`]: every member revokes all it owns before it joins, so `assign`
///   may hand any partition to any member.
/// - [`RebalanceProtocol::Cooperative`] (KIP-429): members keep their partitions while
///   rebalancing and revoke only those their new assignment leaves out. `assign` must then never
///   give a partition to a member while another member still owns it (see
///   [`Subscription::owned_partitions`] and [`Subscription::generation_id`]): it leaves such a
///   partition out this round; its owner revokes it and rejoins, and the follow-up rebalance
///   hands it over.
///
/// A member runs the cooperative protocol only when every one of its assignors is cooperative,
/// as the Java client does; otherwise it is eager.
///
/// **Determinism.** `assign` should be a function of its input only (no clock, no random source)
/// and not depend on the order of `members`: the built-ins sort members by member id (static
/// members first by `group.instance.id`, KIP-345), which keeps a static group's assignment across
/// restarts.
///
/// # Example
///
/// A strategy that gives every partition to the member with the smallest member id, in a group
/// config:
///
/// ```
/// use std::collections::BTreeMap;
/// use consumer_membership_core::config::GroupConfig;
/// use consumer_membership_core::machine::TopicPartition;
/// use consumer_membership_core::machine::classic::assignor::{
///     Assignor, MemberMetadata, RebalanceProtocol,
/// };
///
/// #[derive(Debug)]
/// struct AllToFirst;
///
/// impl Assignor for AllToFirst {
///     fn name(&self) -> &str {
///         "all-to-first"
///     }
///
///     fn protocol(&self) -> RebalanceProtocol {
///         RebalanceProtocol::Eager
///     }
///
///     fn assign(
///         &self,
///         partitions: &BTreeMap<String, i32>,
///         members: &[MemberMetadata],
///     ) -> BTreeMap<String, Vec<TopicPartition>> {
///         // Every member gets an entry, possibly empty.
///         let mut plan: BTreeMap<String, Vec<TopicPartition>> =
///             members.iter().map(|m| (m.member_id.clone(), Vec::new())).collect();
///         let Some(first) = members.iter().min_by(|a, b| a.member_id.cmp(&b.member_id)) else {
///             return plan;
///         };
///         let mine = plan.get_mut(&first.member_id).expect("every member has an entry");
///         for topic in &first.subscription.topics {
///             // Subscribed topics that do not exist are not in `partitions`.
///             for p in 0..partitions.get(topic).copied().unwrap_or(0) {
///                 mine.push(TopicPartition::new(topic.as_str(), p));
///             }
///         }
///         mine.sort();
///         plan
///     }
/// }
///
/// let group = GroupConfig::new("orders").with_assignor(AllToFirst);
/// group.validate()?;
/// assert_eq!(group.assignor_names(), ["all-to-first"]);
///
/// let members = [MemberMetadata {
///     member_id: "m-1".into(),
///     instance_id: None,
///     subscription: consumer_membership_core::machine::classic::subscription::Subscription::new(["t"]),
/// }];
/// let plan = AllToFirst.assign(&BTreeMap::from([("t".to_string(), 2)]), &members);
/// assert_eq!(plan["m-1"], [TopicPartition::new("t", 0), TopicPartition::new("t", 1)]);
/// # Ok::<(), consumer_membership_core::ConfigError>(())
/// ```
pub trait Assignor: Send + Sync + std::fmt::Debug {
    /// The protocol name in JoinGroup (see **Names** above): non-empty, the same on every member
    /// using this strategy, distinct from the member's other assignors' names.
    fn name(&self) -> &str;

    /// The rebalance protocol the assignor needs (see **Rebalance protocol** above). Java's
    /// `supportedProtocols()` lists every protocol an assignor supports (cooperative-sticky:
    /// COOPERATIVE and EAGER); this returns the preferred one.
    fn protocol(&self) -> RebalanceProtocol;

    /// Computes the assignment of one rebalance (called on the leader only).
    ///
    /// - `partitions`: topic -> partition count (partitions `0..count`), for the subscribed
    ///   topics that exist; a subscribed topic that does not exist (yet) is absent, and its
    ///   subscribers get nothing of it (the leader checks again and rebalances once it appears).
    /// - `members`: every member of the generation, the leader included, with what it sent in
    ///   JoinGroup for this assignor's name, in the coordinator's order.
    ///
    /// Returns member id -> the partitions that member consumes in the new generation. A member
    /// missing from the result gets an empty assignment; ids not in `members` are ignored.
    /// Sorted lists and an entry for every member are customary (the built-ins do both). A
    /// partition should go to at most one member; with the cooperative protocol, see above.
    fn assign(
        &self,
        partitions: &BTreeMap<String, i32>,
        members: &[MemberMetadata],
    ) -> BTreeMap<String, Vec<TopicPartition>>;
}

/// The built-in assignor Java calls `name`: "range", "roundrobin" or "cooperative-sticky".
pub fn by_name(name: &str) -> Option<Arc<dyn Assignor>> {
    match name {
        range::NAME => Some(Arc::new(Range)),
        round_robin::NAME => Some(Arc::new(RoundRobin)),
        cooperative_sticky::NAME => Some(Arc::new(CooperativeSticky)),
        _ => None,
    }
}

/// Java's `AbstractPartitionAssignor.MemberInfo.compareTo` (KIP-345): static members first,
/// ordered by `group.instance.id`, then dynamic members by member id. Java leaves ties (two
/// members with one instance id) in map order; this breaks them by member id.
fn member_order(a: &MemberMetadata, b: &MemberMetadata) -> Ordering {
    let by_instance = match (&a.instance_id, &b.instance_id) {
        (Some(x), Some(y)) => x.cmp(y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    };
    by_instance.then_with(|| a.member_id.cmp(&b.member_id))
}

/// The members with duplicate ids dropped (first entry kept), sorted by member id.
fn unique_members(members: &[MemberMetadata]) -> Vec<&MemberMetadata> {
    let mut seen = BTreeSet::new();
    let mut unique: Vec<&MemberMetadata> = members
        .iter()
        .filter(|m| seen.insert(m.member_id.as_str()))
        .collect();
    unique.sort_by(|a, b| a.member_id.cmp(&b.member_id));
    unique
}

/// The partition count of `topic`, or `None` when it does not exist or has no partitions.
fn partition_count(partitions: &BTreeMap<String, i32>, topic: &str) -> Option<i32> {
    partitions.get(topic).copied().filter(|&n| n > 0)
}

/// The member's subscribed topics that exist and have partitions, sorted, without duplicates.
fn assignable_topics<'a>(
    partitions: &BTreeMap<String, i32>,
    member: &'a MemberMetadata,
) -> BTreeSet<&'a str> {
    member
        .subscription
        .topics
        .iter()
        .map(String::as_str)
        .filter(|t| partition_count(partitions, t).is_some())
        .collect()
}

/// An empty assignment for every (unique) member.
fn empty_assignment(members: &[&MemberMetadata]) -> BTreeMap<String, Vec<TopicPartition>> {
    members
        .iter()
        .map(|m| (m.member_id.clone(), Vec::new()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_java_and_by_name_finds_them() {
        for (name, protocol) in [
            ("range", RebalanceProtocol::Eager),
            ("roundrobin", RebalanceProtocol::Eager),
            ("cooperative-sticky", RebalanceProtocol::Cooperative),
        ] {
            let assignor = by_name(name).unwrap();
            assert_eq!(assignor.name(), name);
            assert_eq!(assignor.protocol(), protocol);
        }
        assert!(by_name("sticky").is_none());
        assert!(by_name("Range").is_none());
        assert!(RebalanceProtocol::Eager < RebalanceProtocol::Cooperative);
    }

    #[test]
    fn member_order_puts_static_members_first_by_instance_id() {
        let m = |id: &str, instance: Option<&str>| MemberMetadata {
            member_id: id.into(),
            instance_id: instance.map(Into::into),
            subscription: Subscription::default(),
        };
        let mut members = [
            m("a", None),
            m("z", Some("i1")),
            m("b", Some("i0")),
            m("0", None),
            m("c", Some("i0")),
        ];
        members.sort_by(member_order);
        let ids: Vec<&str> = members.iter().map(|m| m.member_id.as_str()).collect();
        assert_eq!(ids, ["b", "c", "z", "0", "a"]);
    }

    #[test]
    fn duplicate_member_ids_are_taken_once() {
        let partitions = BTreeMap::from([("t".to_owned(), 4)]);
        let member = |topics: &[&str]| MemberMetadata {
            member_id: "m".into(),
            instance_id: None,
            subscription: Subscription::new(topics.iter().copied()),
        };
        let members = [member(&["t"]), member(&["u"])];
        for name in ["range", "roundrobin", "cooperative-sticky"] {
            let result = by_name(name).unwrap().assign(&partitions, &members);
            assert_eq!(result.len(), 1, "{name}");
            assert_eq!(result["m"].len(), 4, "{name}");
        }
    }

    #[test]
    fn no_members_and_bad_partition_counts_are_harmless() {
        let partitions = BTreeMap::from([
            ("neg".to_owned(), -3),
            ("zero".to_owned(), 0),
            ("t".to_owned(), 2),
        ]);
        let member = MemberMetadata {
            member_id: "m".into(),
            instance_id: None,
            subscription: Subscription {
                topics: vec!["neg".into(), "zero".into(), "t".into(), "missing".into()],
                owned_partitions: vec![
                    TopicPartition::new("neg", 0),
                    TopicPartition::new("t", 7),
                    TopicPartition::new("t", -1),
                    TopicPartition::new("missing", 0),
                ],
                generation_id: 3,
                ..Subscription::default()
            },
        };
        for name in ["range", "roundrobin", "cooperative-sticky"] {
            let assignor = by_name(name).unwrap();
            assert!(assignor.assign(&partitions, &[]).is_empty());
            let result = assignor.assign(&partitions, std::slice::from_ref(&member));
            assert_eq!(
                result["m"],
                vec![TopicPartition::new("t", 0), TopicPartition::new("t", 1)],
                "{name}"
            );
        }
    }
}
