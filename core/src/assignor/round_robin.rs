//! The round-robin assignor (Java's `RoundRobinAssignor`, `"roundrobin"`).

use std::collections::{BTreeMap, BTreeSet};

use super::{
    Assignor, MemberMetadata, RebalanceProtocol, assignable_topics, empty_assignment, member_order,
    partition_count, unique_members,
};
use crate::partition::TopicPartition;

pub(super) const NAME: &str = "roundrobin";

/// Lays out every partition of every subscribed topic, sorted by topic then partition, and deals
/// them out one at a time over the members in a circle, skipping a member not subscribed to the
/// partition's topic. The circle keeps turning across topics. Members are ordered as Java's
/// `MemberInfo` orders them: static members first by `group.instance.id`, then dynamic members by
/// member id.
///
/// With identical subscriptions the shares differ by at most one. Java's example: C0 and C1 both
/// subscribed to t0 and t1 of three partitions each get C0 = [t0p0, t0p2, t1p1] and
/// C1 = [t0p1, t1p0, t1p2].
#[derive(Debug, Clone, Copy, Default)]
pub struct RoundRobin;

impl Assignor for RoundRobin {
    fn name(&self) -> &str {
        NAME
    }

    fn protocol(&self) -> RebalanceProtocol {
        RebalanceProtocol::Eager
    }

    fn assign(
        &self,
        partitions: &BTreeMap<String, i32>,
        members: &[MemberMetadata],
    ) -> BTreeMap<String, Vec<TopicPartition>> {
        let mut members = unique_members(members);
        let mut assignment = empty_assignment(&members);
        members.sort_by(|a, b| member_order(a, b));
        let subscriptions: Vec<BTreeSet<&str>> = members
            .iter()
            .map(|m| assignable_topics(partitions, m))
            .collect();
        let all_topics: BTreeSet<&str> = subscriptions.iter().flatten().copied().collect();

        // Java's CircularIterator over the sorted members: `next` is the member the following
        // partition is offered to first.
        let mut next = 0usize;
        for topic in all_topics {
            let count = partition_count(partitions, topic).unwrap_or(0);
            for partition in 0..count {
                // Someone subscribes to `topic`, so this finds a member within one turn.
                let Some(offset) = (0..members.len())
                    .find(|k| subscriptions[(next + k) % members.len()].contains(topic))
                else {
                    break;
                };
                let chosen = (next + offset) % members.len();
                if let Some(list) = assignment.get_mut(&members[chosen].member_id) {
                    list.push(TopicPartition::new(topic, partition));
                }
                next = (chosen + 1) % members.len();
            }
        }
        assignment
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    #[test]
    fn java_example_two_members_two_topics_of_three() {
        let partitions = topics(&[("t0", 3), ("t1", 3)]);
        let members = [member("C0", &["t0", "t1"]), member("C1", &["t0", "t1"])];
        let result = RoundRobin.assign(&partitions, &members);
        assert_eq!(result["C0"], tps(&[("t0", 0), ("t0", 2), ("t1", 1)]));
        assert_eq!(result["C1"], tps(&[("t0", 1), ("t1", 0), ("t1", 2)]));
    }

    #[test]
    fn java_example_unequal_subscriptions() {
        // C0: t0; C1: t0, t1; C2: t0, t1, t2; with 1, 2 and 3 partitions.
        let partitions = topics(&[("t0", 1), ("t1", 2), ("t2", 3)]);
        let members = [
            member("C0", &["t0"]),
            member("C1", &["t0", "t1"]),
            member("C2", &["t0", "t1", "t2"]),
        ];
        let result = RoundRobin.assign(&partitions, &members);
        assert_eq!(result["C0"], tps(&[("t0", 0)]));
        assert_eq!(result["C1"], tps(&[("t1", 0)]));
        assert_eq!(
            result["C2"],
            tps(&[("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)])
        );
    }

    #[test]
    fn static_members_are_ordered_by_instance_id() {
        // Java's example: three members, two topics of three partitions; after a bounce the member
        // ids change (C0 -> C5, C1 -> C3, C2 -> C4) but the instance ids keep the assignment.
        let partitions = topics(&[("t0", 3), ("t1", 3)]);
        let before = [
            static_member("C0", "I0", &["t0", "t1"]),
            static_member("C1", "I1", &["t0", "t1"]),
            static_member("C2", "I2", &["t0", "t1"]),
        ];
        let after = [
            static_member("C5", "I0", &["t0", "t1"]),
            static_member("C3", "I1", &["t0", "t1"]),
            static_member("C4", "I2", &["t0", "t1"]),
        ];
        let before = RoundRobin.assign(&partitions, &before);
        let after = RoundRobin.assign(&partitions, &after);
        assert_eq!(before["C0"], tps(&[("t0", 0), ("t1", 0)]));
        assert_eq!(after["C5"], before["C0"]);
        assert_eq!(after["C3"], before["C1"]);
        assert_eq!(after["C4"], before["C2"]);

        // Dynamic members with the new ids would have been shuffled.
        let dynamic = [
            member("C5", &["t0", "t1"]),
            member("C3", &["t0", "t1"]),
            member("C4", &["t0", "t1"]),
        ];
        let dynamic = RoundRobin.assign(&partitions, &dynamic);
        assert_eq!(dynamic["C3"], tps(&[("t0", 0), ("t1", 0)]));
    }

    #[test]
    fn three_members_twelve_partitions() {
        let partitions = topics(&[("t", 12)]);
        let members = [
            member("m1", &["t"]),
            member("m2", &["t"]),
            member("m3", &["t"]),
        ];
        let result = RoundRobin.assign(&partitions, &members);
        check_valid(&partitions, &members, &result);
        check_complete(&partitions, &members, &result);
        assert!(result.values().all(|a| a.len() == 4));
        assert_eq!(result["m1"], tps(&[("t", 0), ("t", 3), ("t", 6), ("t", 9)]));
    }

    #[test]
    fn randomized_properties() {
        for_random_groups(600, 0x5eed_0002, |case| {
            let result = RoundRobin.assign(&case.partitions, &case.members);
            check_valid(&case.partitions, &case.members, &result);
            check_complete(&case.partitions, &case.members, &result);
            if case.equal_subscriptions() {
                check_balanced_within(&result, 1);
            }
            check_deterministic(&RoundRobin, case);
        });
    }

    #[test]
    fn hundred_members_thousand_partitions_is_fast() {
        assert_fast(&RoundRobin);
    }
}
