//! Builders, invariant checks and the seeded random-group generator shared by the assignor tests.

use std::collections::{BTreeMap, BTreeSet};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Assignor, MemberMetadata};
use crate::partition::TopicPartition;
use crate::wire::subscription::Subscription;

pub(super) type Result = BTreeMap<String, Vec<TopicPartition>>;

pub(super) fn topics(list: &[(&str, i32)]) -> BTreeMap<String, i32> {
    list.iter().map(|&(t, n)| (t.to_owned(), n)).collect()
}

pub(super) fn tps(list: &[(&str, i32)]) -> Vec<TopicPartition> {
    list.iter()
        .map(|&(t, p)| TopicPartition::new(t, p))
        .collect()
}

pub(super) fn member(id: &str, topics: &[&str]) -> MemberMetadata {
    MemberMetadata {
        member_id: id.to_owned(),
        instance_id: None,
        subscription: Subscription::new(topics.iter().copied()),
    }
}

pub(super) fn static_member(id: &str, instance: &str, topics: &[&str]) -> MemberMetadata {
    MemberMetadata {
        instance_id: Some(instance.to_owned()),
        ..member(id, topics)
    }
}

/// `member` owning `owned` since `generation`.
pub(super) fn owning(
    id: &str,
    topics: &[&str],
    owned: &[TopicPartition],
    generation: i32,
) -> MemberMetadata {
    let mut m = member(id, topics);
    m.subscription.owned_partitions = owned.to_vec();
    m.subscription.generation_id = generation;
    m
}

/// The partitions `topic` has, or none.
fn all_partitions(partitions: &BTreeMap<String, i32>, topic: &str) -> Vec<TopicPartition> {
    let n = partitions.get(topic).copied().unwrap_or(0).max(0);
    (0..n).map(|p| TopicPartition::new(topic, p)).collect()
}

fn subscribed(m: &MemberMetadata, topic: &str) -> bool {
    m.subscription.topics.iter().any(|t| t == topic)
}

/// Every member present (and nobody else), lists sorted without duplicates, only existing
/// partitions of subscribed topics, no partition twice.
pub(super) fn check_valid(
    partitions: &BTreeMap<String, i32>,
    members: &[MemberMetadata],
    result: &Result,
) {
    let ids: BTreeSet<&str> = members.iter().map(|m| m.member_id.as_str()).collect();
    let keys: BTreeSet<&str> = result.keys().map(String::as_str).collect();
    assert_eq!(ids, keys, "members and result keys differ");
    let mut seen = BTreeSet::new();
    for m in members {
        let list = &result[&m.member_id];
        assert!(
            list.windows(2).all(|w| w[0] < w[1]),
            "{} not sorted/unique: {list:?}",
            m.member_id
        );
        for tp in list {
            assert!(
                subscribed(m, &tp.topic),
                "{} got {tp} of an unsubscribed topic",
                m.member_id
            );
            let n = partitions.get(tp.topic()).copied().unwrap_or(0);
            assert!(
                (0..n).contains(&tp.partition),
                "{} got nonexistent {tp}",
                m.member_id
            );
            assert!(seen.insert(tp.clone()), "{tp} assigned twice");
        }
    }
}

/// Every partition of a topic with at least one subscriber is assigned.
pub(super) fn check_complete(
    partitions: &BTreeMap<String, i32>,
    members: &[MemberMetadata],
    result: &Result,
) {
    let assigned: BTreeSet<&TopicPartition> = result.values().flatten().collect();
    for topic in partitions.keys() {
        if members.iter().any(|m| subscribed(m, topic)) {
            for tp in all_partitions(partitions, topic) {
                assert!(assigned.contains(&tp), "{tp} unassigned");
            }
        }
    }
}

/// Per topic, the topic's subscribers' shares differ by at most one.
pub(super) fn check_per_topic_balance(
    partitions: &BTreeMap<String, i32>,
    members: &[MemberMetadata],
    result: &Result,
) {
    for topic in partitions.keys() {
        let counts: Vec<usize> = members
            .iter()
            .filter(|m| subscribed(m, topic))
            .map(|m| {
                result[&m.member_id]
                    .iter()
                    .filter(|tp| tp.topic() == topic.as_str())
                    .count()
            })
            .collect();
        if let (Some(min), Some(max)) = (counts.iter().min(), counts.iter().max()) {
            assert!(max - min <= 1, "{topic} shares {counts:?}");
        }
    }
}

/// All members' assignment sizes differ by at most `slack`.
pub(super) fn check_balanced_within(result: &Result, slack: usize) {
    let sizes: Vec<usize> = result.values().map(Vec::len).collect();
    let min = sizes.iter().min().copied().unwrap_or(0);
    let max = sizes.iter().max().copied().unwrap_or(0);
    assert!(max - min <= slack.max(1), "sizes {sizes:?}");
}

/// The same result whatever order the members come in.
pub(super) fn check_deterministic(assignor: &dyn Assignor, case: &RandomCase) {
    let expected = assignor.assign(&case.partitions, &case.members);
    let mut reversed = case.members.clone();
    reversed.reverse();
    assert_eq!(assignor.assign(&case.partitions, &reversed), expected);
    let mut rotated = case.members.clone();
    rotated.rotate_left(case.members.len() / 2);
    assert_eq!(assignor.assign(&case.partitions, &rotated), expected);
}

/// One random group.
#[derive(Debug, Clone)]
pub(super) struct RandomCase {
    pub(super) partitions: BTreeMap<String, i32>,
    pub(super) members: Vec<MemberMetadata>,
}

impl RandomCase {
    /// Whether every member subscribes to the same set of (existing) topics.
    pub(super) fn equal_subscriptions(&self) -> bool {
        let sets: BTreeSet<BTreeSet<&str>> = self
            .members
            .iter()
            .map(|m| {
                m.subscription
                    .topics
                    .iter()
                    .map(String::as_str)
                    .filter(|t| self.partitions.get(*t).is_some_and(|&n| n > 0))
                    .collect()
            })
            .collect();
        sets.len() <= 1
    }
}

/// Runs `check` over `cases` random groups from `seed`: 1-8 members, 1-4 topics of 0-20
/// partitions (sometimes a subscribed topic is missing from the metadata), identical subscriptions
/// in about a third of the groups and random ones otherwise, some static members, and random
/// previous ownership: most partitions owned by a random member, some claimed twice, some claims
/// on partitions that no longer exist, random generations.
pub(super) fn for_random_groups(cases: usize, seed: u64, check: impl FnMut(&RandomCase)) {
    for_random_groups_up_to(cases, seed, (8, 4, 20), check);
}

/// [`for_random_groups`] with at most `limits` = (members, topics, partitions per topic).
pub(super) fn for_random_groups_up_to(
    cases: usize,
    seed: u64,
    limits: (usize, usize, i32),
    mut check: impl FnMut(&RandomCase),
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for case_no in 0..cases {
        let case = random_case(&mut rng, limits);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&case)));
        if let Err(panic) = outcome {
            eprintln!("failing case #{case_no} (seed {seed:#x}): {case:#?}");
            std::panic::resume_unwind(panic);
        }
    }
}

fn random_case(rng: &mut ChaCha8Rng, limits: (usize, usize, i32)) -> RandomCase {
    let (max_members, max_topics, max_partitions) = limits;
    let n_topics = rng.random_range(1..=max_topics);
    let topic_names: Vec<String> = (0..n_topics).map(|i| format!("topic-{i}")).collect();
    let mut partitions = BTreeMap::new();
    for name in &topic_names {
        // One topic in ten is subscribed to but missing from the metadata.
        if rng.random_bool(0.9) {
            partitions.insert(name.clone(), rng.random_range(0..=max_partitions));
        }
    }
    let n_members = rng.random_range(1..=max_members);
    let equal = rng.random_bool(0.35);
    let common: Vec<String> = random_subset(rng, &topic_names);
    let mut members = Vec::new();
    for i in 0..n_members {
        let topics = if equal {
            common.clone()
        } else {
            random_subset(rng, &topic_names)
        };
        // Member ids in an order unrelated to the index.
        let member_id = format!("m{:03}-{i}", rng.random_range(0..1000));
        let instance_id = rng
            .random_bool(0.3)
            .then(|| format!("instance-{}", rng.random_range(0..10)));
        let generation = *[-1, 1, 2, 3, 3].get(rng.random_range(0..5)).unwrap_or(&-1);
        members.push(MemberMetadata {
            member_id,
            instance_id,
            subscription: Subscription {
                topics,
                generation_id: generation,
                ..Subscription::default()
            },
        });
    }
    // Previous ownership.
    for (topic, &n) in &partitions {
        for p in 0..n {
            if rng.random_bool(0.7) {
                let owner = rng.random_range(0..n_members);
                members[owner]
                    .subscription
                    .owned_partitions
                    .push(TopicPartition::new(topic.as_str(), p));
                if rng.random_bool(0.08) {
                    let other = rng.random_range(0..n_members);
                    members[other]
                        .subscription
                        .owned_partitions
                        .push(TopicPartition::new(topic.as_str(), p));
                }
            }
        }
    }
    for m in &mut members {
        if rng.random_bool(0.1) {
            let topic = &topic_names[rng.random_range(0..topic_names.len())];
            m.subscription.owned_partitions.push(TopicPartition::new(
                topic.as_str(),
                max_partitions + rng.random_range(0..3),
            ));
        }
    }
    RandomCase {
        partitions,
        members,
    }
}

fn random_subset(rng: &mut ChaCha8Rng, names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|_| rng.random_bool(0.6))
        .cloned()
        .collect()
}

/// 100 members x 1000 partitions (10 topics of 100), all subscribed to everything. core/src/machine may
/// not read a clock (core/clippy.toml), so the time is not asserted here; the test is
/// named `*_is_fast` so `cargo test --lib is_fast` times it, and the algorithms are O(P log P).
pub(super) fn assert_fast(assignor: &dyn Assignor) {
    let topic_names: Vec<String> = (0..10).map(|i| format!("t{i}")).collect();
    let partitions: BTreeMap<String, i32> = topic_names.iter().map(|t| (t.clone(), 100)).collect();
    let members: Vec<MemberMetadata> = (0..100)
        .map(|i| MemberMetadata {
            member_id: format!("member-{i:03}"),
            instance_id: None,
            subscription: Subscription::new(topic_names.iter().cloned()),
        })
        .collect();
    let result = assignor.assign(&partitions, &members);
    check_valid(&partitions, &members, &result);
    check_complete(&partitions, &members, &result);
    assert!(result.values().all(|a| a.len() == 10));
}
