//! The range assignor (Java's `RangeAssignor`, `"range"`).

use std::collections::BTreeMap;

use super::{
    Assignor, MemberMetadata, RebalanceProtocol, assignable_topics, empty_assignment, member_order,
    unique_members,
};
use crate::partition::TopicPartition;

pub(super) const NAME: &str = "range";

/// Per topic, lays the partitions out in order and the topic's subscribers in order, and gives
/// each subscriber one contiguous range; the first `partitions % subscribers` subscribers get one
/// partition more. Subscribers are ordered as Java's `MemberInfo` orders them: static members
/// first by `group.instance.id` (so a static group keeps its assignment across restarts that
/// change member ids), then dynamic members by member id.
///
/// Java's example: members C0 and C1 both subscribed to t0 and t1 of three partitions each get
/// C0 = [t0p0, t0p1, t1p0, t1p1] and C1 = [t0p2, t1p2].
///
/// Java's rack-aware variant (used when members send a `rack_id` and partition replicas have
/// racks) is not implemented: this assignor does not see replica racks and ignores `rack_id`,
/// which Java's algorithm also reduces to when racks are absent or every partition is on every
/// rack.
#[derive(Debug, Clone, Copy, Default)]
pub struct Range;

impl Assignor for Range {
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
        let members = unique_members(members);
        let mut assignment = empty_assignment(&members);

        // topic -> its subscribers, for topics that exist with partitions.
        let mut subscribers: BTreeMap<&str, Vec<&MemberMetadata>> = BTreeMap::new();
        for &member in &members {
            for topic in assignable_topics(partitions, member) {
                subscribers.entry(topic).or_default().push(member);
            }
        }

        // Topics in name order, so every member's list comes out sorted.
        for (topic, mut consumers) in subscribers {
            let Some(count) = super::partition_count(partitions, topic) else {
                continue;
            };
            consumers.sort_by(|a, b| member_order(a, b));
            // RangeAssignor.TopicAssignmentState: numPartitionsPerConsumer = n / m, and the first
            // n % m consumers (remainingConsumersWithExtraPartition) take one more.
            let n = count as usize;
            let per_member = n / consumers.len();
            let with_extra = n % consumers.len();
            let mut next = 0usize;
            for (i, member) in consumers.iter().enumerate() {
                let len = per_member + usize::from(i < with_extra);
                if let Some(list) = assignment.get_mut(&member.member_id) {
                    list.extend((next..next + len).map(|p| TopicPartition::new(topic, p as i32)));
                }
                next += len;
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
        let result = Range.assign(&partitions, &members);
        assert_eq!(
            result["C0"],
            tps(&[("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)])
        );
        assert_eq!(result["C1"], tps(&[("t0", 2), ("t1", 2)]));
    }

    #[test]
    fn members_not_subscribed_to_a_topic_get_none_of_it() {
        // RangeAssignorTest.testOnlyAssignsPartitionsFromSubscribedTopics and friends.
        let partitions = topics(&[("t1", 3), ("t2", 2), ("other", 5)]);
        let members = [
            member("c1", &["t1"]),
            member("c2", &["t1", "t2"]),
            member("c3", &[]),
        ];
        let result = Range.assign(&partitions, &members);
        assert_eq!(result["c1"], tps(&[("t1", 0), ("t1", 1)]));
        assert_eq!(result["c2"], tps(&[("t1", 2), ("t2", 0), ("t2", 1)]));
        assert_eq!(result["c3"], tps(&[]));
    }

    #[test]
    fn static_members_are_ordered_by_instance_id() {
        // Java's static-membership example: after a bounce the member ids change order, the
        // instance ids do not, and neither does the assignment.
        let partitions = topics(&[("t0", 3), ("t1", 3)]);
        let before = [
            static_member("C0", "I0", &["t0", "t1"]),
            static_member("C1", "I1", &["t0", "t1"]),
        ];
        let after = [
            static_member("C3", "I0", &["t0", "t1"]),
            static_member("C2", "I1", &["t0", "t1"]),
        ];
        let before = Range.assign(&partitions, &before);
        let after = Range.assign(&partitions, &after);
        assert_eq!(before["C0"], after["C3"]);
        assert_eq!(before["C1"], after["C2"]);
        assert_eq!(
            after["C3"],
            tps(&[("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)])
        );

        // Static members come before dynamic ones whatever their member ids.
        let mixed = [
            member("a-dynamic", &["t0"]),
            static_member("z-static", "I9", &["t0"]),
        ];
        let result = Range.assign(&topics(&[("t0", 3)]), &mixed);
        assert_eq!(result["z-static"], tps(&[("t0", 0), ("t0", 1)]));
        assert_eq!(result["a-dynamic"], tps(&[("t0", 2)]));
    }

    #[test]
    fn three_members_twelve_partitions() {
        let partitions = topics(&[("t", 12)]);
        let members = [
            member("m1", &["t"]),
            member("m2", &["t"]),
            member("m3", &["t"]),
        ];
        let result = Range.assign(&partitions, &members);
        check_valid(&partitions, &members, &result);
        check_complete(&partitions, &members, &result);
        assert!(result.values().all(|a| a.len() == 4));
        assert_eq!(result["m2"], tps(&[("t", 4), ("t", 5), ("t", 6), ("t", 7)]));
    }

    #[test]
    fn more_members_than_partitions() {
        let partitions = topics(&[("t", 2)]);
        let members = [
            member("a", &["t"]),
            member("b", &["t"]),
            member("c", &["t"]),
        ];
        let result = Range.assign(&partitions, &members);
        assert_eq!(result["a"], tps(&[("t", 0)]));
        assert_eq!(result["b"], tps(&[("t", 1)]));
        assert_eq!(result["c"], tps(&[]));
    }

    #[test]
    fn randomized_properties() {
        for_random_groups(600, 0x5eed_0001, |case| {
            let result = Range.assign(&case.partitions, &case.members);
            check_valid(&case.partitions, &case.members, &result);
            check_complete(&case.partitions, &case.members, &result);
            check_per_topic_balance(&case.partitions, &case.members, &result);
            if case.equal_subscriptions() {
                // Range balances per topic only: with equal subscriptions a member is at most one
                // partition per topic ahead.
                check_balanced_within(&result, case.partitions.len());
            }
            check_deterministic(&Range, case);
        });
    }

    #[test]
    fn hundred_members_thousand_partitions_is_fast() {
        assert_fast(&Range);
    }
}
