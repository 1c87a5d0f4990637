//! The release-dependent rules, the assignor choice and the offset rules, driven request by
//! request against the simulated coordinator. Each test fails when its rule is missing.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, GroupId, OffsetCommitRequest,
    OffsetFetchRequest, OffsetFetchResponse, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};

use super::{BrokerProfile, BrokerRules, ServerAssignor};
use crate::request::{RequestBody, ResponseBody};
use crate::sim::ConnId;
use crate::sim::codes::*;
use crate::sim::coordinator::{CoordinatorConfig, Reply, SimCoordinator, topic_id};

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_owned())
}

struct Broker {
    c: SimCoordinator,
    now: Instant,
    correlation: i32,
    /// Whether `send` lets the request's own records commit before it returns.
    wait_commits: bool,
}

impl Broker {
    /// A coordinator with topics t (6 partitions) and u (3).
    fn new(rules: BrokerRules) -> Self {
        let mut config = CoordinatorConfig::new("g");
        config.topics = vec![("t".into(), 6), ("u".into(), 3)];
        config.rules = rules;
        let now = crate::testutil::epoch();
        Self {
            c: SimCoordinator::new(config, now),
            now,
            correlation: 0,
            wait_commits: true,
        }
    }

    /// The release's rules, the target computed on every heartbeat that needs one (4.3+:
    /// `group.consumer.assignment.interval.ms=0`, as tests against a broker set it).
    fn of(profile: BrokerProfile) -> Self {
        let mut rules = BrokerRules::of(profile);
        rules.assignment_interval = Duration::ZERO;
        Self::new(rules)
    }

    fn drain(&mut self) -> Vec<Reply> {
        std::iter::from_fn(|| self.c.poll_response()).collect()
    }

    fn send(&mut self, version: i16, request: RequestKind) -> Vec<Reply> {
        self.correlation += 1;
        self.c.handle_request(
            ConnId(1),
            self.correlation,
            "client",
            version,
            RequestBody::Kafka(request),
            self.now,
        );
        // An answer that waits for its records comes once they commit (`append_latency`).
        let mut replies = self.drain();
        let commit = self.now + self.c.config().append_latency;
        while replies.is_empty()
            && self.wait_commits
            && let Some(t) = self.c.poll_timeout()
            && t <= commit
        {
            self.now = self.now.max(t);
            self.c.handle_timeout(self.now);
            replies = self.drain();
        }
        replies
    }

    /// Moves the clock, firing the coordinator's timers (appends commit).
    fn advance(&mut self, d: Duration) -> Vec<Reply> {
        self.now += d;
        self.c.handle_timeout(self.now);
        self.drain()
    }

    /// A ConsumerGroupHeartbeat (v1): epoch 0 sends the full request with an empty owned list.
    fn heartbeat(
        &mut self,
        member: &str,
        epoch: i32,
        topics: Option<&[&str]>,
        owned: Option<&[(&str, i32)]>,
        assignor: Option<&str>,
    ) -> ConsumerGroupHeartbeatResponse {
        let owned = if epoch == 0 { Some(&[][..]) } else { owned };
        let r = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_member_id(s(member))
            .with_member_epoch(epoch)
            .with_rebalance_timeout_ms(if epoch == 0 { 30_000 } else { -1 })
            .with_subscribed_topic_names(
                topics.map(|ts| ts.iter().map(|t| TopicName(s(t))).collect()),
            )
            .with_server_assignor(assignor.map(s))
            .with_topic_partitions(owned.map(|tps| {
                let mut by: std::collections::BTreeMap<&str, Vec<i32>> = Default::default();
                for (t, p) in tps {
                    by.entry(t).or_default().push(*p);
                }
                by.into_iter()
                    .map(|(t, ps)| {
                        TopicPartitions::default()
                            .with_topic_id(topic_id(t))
                            .with_partitions(ps)
                    })
                    .collect()
            }));
        let mut replies = self.send(1, RequestKind::ConsumerGroupHeartbeat(r));
        assert_eq!(replies.len(), 1, "one answer");
        match replies.remove(0).body {
            ResponseBody::Kafka(ResponseKind::ConsumerGroupHeartbeat(r)) => r,
            other => panic!("not a heartbeat answer: {other:?}"),
        }
    }

    /// A heartbeat reporting the member's own view of what it owns: everything the
    /// coordinator assigned to it, minus what it must revoke (it acknowledges at once).
    fn ack(&mut self, member: &str) -> ConsumerGroupHeartbeatResponse {
        let m = self.member(member);
        let owned: Vec<(String, i32)> = m.assigned.clone();
        let owned: Vec<(&str, i32)> = owned.iter().map(|(t, p)| (t.as_str(), *p)).collect();
        self.heartbeat(member, m.epoch, None, Some(&owned), None)
    }

    fn member(&self, id: &str) -> crate::sim::coordinator::ConsumerMemberView {
        self.c
            .consumer_members()
            .into_iter()
            .find(|m| m.member_id == id)
            .unwrap_or_else(|| panic!("{id} is no member"))
    }

    fn commit(&mut self, member: &str, epoch: i32, parts: &[(&str, i32)], offset: i64) -> i16 {
        let r = OffsetCommitRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_member_id(s(member))
            .with_generation_id_or_member_epoch(epoch)
            .with_topics(
                parts
                    .iter()
                    .map(|(t, p)| {
                        OffsetCommitRequestTopic::default()
                            .with_name(TopicName(s(t)))
                            .with_partitions(vec![
                                OffsetCommitRequestPartition::default()
                                    .with_partition_index(*p)
                                    .with_committed_offset(offset),
                            ])
                    })
                    .collect(),
            );
        let mut replies = self.send(9, RequestKind::OffsetCommit(r));
        if replies.is_empty() {
            // A successful commit is answered once its records are committed.
            replies = self.advance(Duration::from_millis(10));
        }
        match &replies[..] {
            [
                Reply {
                    body: ResponseBody::Kafka(ResponseKind::OffsetCommit(r)),
                    ..
                },
            ] => r.topics[0].partitions[0].error_code,
            other => panic!("not one commit answer: {other:?}"),
        }
    }

    /// A v9 OffsetFetch of t-0 with RequireStable and the member fields.
    fn fetch_v9(&mut self, member: Option<&str>, epoch: i32, stable: bool) -> Vec<Reply> {
        let r = OffsetFetchRequest::default()
            .with_require_stable(stable)
            .with_groups(vec![
                OffsetFetchRequestGroup::default()
                    .with_group_id(GroupId(s("g")))
                    .with_member_id(member.map(s))
                    .with_member_epoch(epoch)
                    .with_topics(Some(vec![
                        OffsetFetchRequestTopics::default()
                            .with_name(TopicName(s("t")))
                            .with_partition_indexes(vec![0]),
                    ])),
            ]);
        self.send(9, RequestKind::OffsetFetch(r))
    }
}

fn fetched(replies: &[Reply]) -> (i16, i64) {
    match replies {
        [
            Reply {
                body: ResponseBody::Kafka(ResponseKind::OffsetFetch(r)),
                ..
            },
        ] => {
            let g = &r.groups[0];
            let offset = g
                .topics
                .first()
                .map_or(-1, |t| t.partitions[0].committed_offset);
            (g.error_code, offset)
        }
        other => panic!("not one fetch answer: {other:?}"),
    }
}

fn assigned(r: &ConsumerGroupHeartbeatResponse) -> usize {
    r.assignment.as_ref().map_or(0, |a| {
        a.topic_partitions.iter().map(|t| t.partitions.len()).sum()
    })
}

/// Member a alone (6 partitions of t), then b joins and a revokes its half: a ends at epoch 2
/// with previous epoch 1.
fn two_members(b: &mut Broker) {
    let r = b.heartbeat("a", 0, Some(&["t"]), None, None);
    assert_eq!((r.member_epoch, assigned(&r)), (1, 6));
    let r = b.heartbeat("b", 0, Some(&["t"]), None, None);
    assert_eq!(r.member_epoch, 2);
    // a learns what to revoke, then acknowledges.
    b.ack("a");
    let m = b.member("a");
    assert_eq!(m.state, "UNREVOKED_PARTITIONS");
    b.ack("a");
    let m = b.member("a");
    assert_eq!((m.epoch, m.previous_epoch, m.state), (2, 1, "STABLE"));
    // b takes what a released.
    b.ack("b");
    assert_eq!(b.member("b").assigned.len(), 3);
}

#[test]
fn epoch_zero_rejoin_of_a_registered_member_is_fenced_before_4_2() {
    for profile in BrokerProfile::ALL {
        let mut b = Broker::of(profile);
        two_members(&mut b);
        // a was fenced on its side and rejoins with its member id at epoch 0.
        let r = b.heartbeat("a", 0, Some(&["t"]), None, None);
        if profile.rejoin_at_epoch_zero() {
            assert_eq!(r.error_code, NONE, "{profile:?}");
            assert_eq!(r.member_epoch, 2, "{profile:?}: the member is reused");
        } else {
            assert_eq!(r.error_code, FENCED_MEMBER_EPOCH, "{profile:?}");
            // Fenced again and again until the session expires and removes the member.
            b.advance(Duration::from_secs(46));
            let r = b.heartbeat("a", 0, Some(&["t"]), None, None);
            assert_eq!(r.error_code, NONE, "{profile:?} after the session expired");
        }
    }
}

#[test]
fn leaving_unrevoked_partitions_bumps_the_epoch_only_before_4_2() {
    for profile in [BrokerProfile::Kafka40, BrokerProfile::Kafka42] {
        let mut b = Broker::of(profile);
        b.heartbeat("a", 0, Some(&["t"]), None, None);
        b.heartbeat("b", 0, Some(&["t"]), None, None);
        // a must give 3 of its 6 up (target epoch 2) and has not yet acknowledged.
        b.ack("a");
        assert_eq!(b.member("a").state, "UNREVOKED_PARTITIONS");
        // c joins: target epoch 3 takes one more from a.
        b.heartbeat("c", 0, Some(&["t"]), None, None);
        b.ack("a");
        let m = b.member("a");
        assert_eq!(m.state, "UNREVOKED_PARTITIONS", "{profile:?}: {m:?}");
        let expected = if profile.bumps_epoch_after_revocation() {
            2
        } else {
            1
        };
        assert_eq!(m.epoch, expected, "{profile:?}");
    }
}

#[test]
fn a_subscription_change_mid_revocation_updates_the_assignment_from_4_2() {
    for profile in [BrokerProfile::Kafka40, BrokerProfile::Kafka42] {
        let mut b = Broker::of(profile);
        // a alone on u: it keeps u and gives up part of t to b.
        b.heartbeat("a", 0, Some(&["t", "u"]), None, None);
        b.heartbeat("b", 0, Some(&["t"]), None, None);
        b.ack("a");
        let m = b.member("a");
        assert_eq!(m.state, "UNREVOKED_PARTITIONS");
        assert!(m.assigned.iter().any(|(t, _)| t == "u"), "{m:?}");
        // Still owning what it must revoke, a drops topic u.
        let owned: Vec<(String, i32)> = m
            .assigned
            .iter()
            .chain(&m.pending_revocation)
            .cloned()
            .collect();
        let owned: Vec<(&str, i32)> = owned.iter().map(|(t, p)| (t.as_str(), *p)).collect();
        b.heartbeat("a", m.epoch, Some(&["t"]), Some(&owned), None);
        let m = b.member("a");
        let keeps_u = m.assigned.iter().any(|(t, _)| t == "u");
        if profile.subscription_consistency() {
            assert!(
                !keeps_u,
                "{profile:?}: u left the assignment at once: {m:?}"
            );
            assert!(m.pending_revocation.iter().any(|(t, _)| t == "u"));
        } else {
            assert!(keeps_u, "{profile:?}: the member is left as it was: {m:?}");
        }
    }
}

#[test]
fn the_target_waits_for_the_assignment_interval_from_4_3() {
    for profile in [BrokerProfile::Kafka42, BrokerProfile::Kafka43] {
        // The broker's default interval, 1 s.
        let mut b = Broker::new(BrokerRules::of(profile));
        let r = b.heartbeat("a", 0, Some(&["t"]), None, None);
        assert_eq!((r.member_epoch, assigned(&r)), (1, 6), "{profile:?}");
        b.advance(Duration::from_millis(100));
        let r = b.heartbeat("b", 0, Some(&["t"]), None, None);
        if profile.has_assignment_interval() {
            // Answered at the old epoch with nothing; the group epoch moved on.
            assert_eq!((r.member_epoch, assigned(&r)), (1, 0), "{profile:?}");
            assert_eq!(b.c.consumer_epochs(), Some((2, 1)));
            // A heartbeat within the interval changes nothing; after it the target follows.
            b.advance(Duration::from_millis(500));
            b.ack("a");
            assert_eq!(b.c.consumer_epochs(), Some((2, 1)));
            b.advance(Duration::from_millis(500));
            b.ack("a");
            assert_eq!(b.c.consumer_epochs(), Some((2, 2)));
            assert_eq!(b.member("a").pending_revocation.len(), 3);
        } else {
            assert_eq!(r.member_epoch, 2, "{profile:?}");
            assert_eq!(b.c.consumer_epochs(), Some((2, 2)));
        }
    }
}

#[test]
fn the_assignor_is_the_one_members_ask_for_and_unknown_names_are_refused() {
    let mut b = Broker::of(BrokerProfile::Kafka42);
    let r = b.heartbeat("a", 0, Some(&["t"]), None, Some("cooperative-sticky"));
    assert_eq!(r.error_code, UNSUPPORTED_ASSIGNOR);
    let r = b.heartbeat("a", 0, Some(&["t"]), None, Some("sim-round-robin"));
    assert_eq!(r.error_code, UNSUPPORTED_ASSIGNOR, "not listed: refused");
    // range: contiguous halves in member-id order.
    b.heartbeat("a", 0, Some(&["t"]), None, Some("range"));
    b.heartbeat("b", 0, Some(&["t"]), None, Some("range"));
    let t = |p: i32| ("t".to_owned(), p);
    assert_eq!(b.member("a").target, vec![t(0), t(1), t(2)]);
    assert_eq!(b.member("b").target, vec![t(3), t(4), t(5)]);
    // The default (uniform, sticky): a keeps its first three, b gets the rest.
    let mut b = Broker::of(BrokerProfile::Kafka42);
    b.heartbeat("b", 0, Some(&["t"]), None, None);
    b.heartbeat("a", 0, Some(&["t"]), None, None);
    assert_eq!(b.member("b").target, vec![t(0), t(1), t(2)]);
    assert_eq!(b.member("a").target, vec![t(3), t(4), t(5)]);
    // The churn mode, opted into by listing it first: a plain round robin.
    let mut rules = BrokerRules::of(BrokerProfile::Kafka42);
    rules.assignors.insert(0, ServerAssignor::RoundRobin);
    let mut b = Broker::new(rules);
    b.heartbeat("b", 0, Some(&["t"]), None, None);
    b.heartbeat("a", 0, Some(&["t"]), None, None);
    assert_eq!(b.member("a").target, vec![t(0), t(2), t(4)]);
}

#[test]
fn an_older_commit_epoch_is_checked_per_partition_from_4_3() {
    for profile in [BrokerProfile::Kafka42, BrokerProfile::Kafka43] {
        let mut b = Broker::of(profile);
        two_members(&mut b);
        // b: t-3..5 since epoch 2. a: kept t-0..2 since epoch 1, now at epoch 2.
        let a = b.member("a");
        let kept = a.assigned[0].1;
        let per_partition = profile.per_partition_commit_epochs();
        let expect = |ok: bool| if ok { NONE } else { STALE_MEMBER_EPOCH };
        assert_eq!(b.commit("a", 2, &[("t", kept)], 1), NONE);
        // An in-flight commit sent at epoch 1, for a partition held since epoch 1.
        assert_eq!(
            b.commit("a", 1, &[("t", kept)], 2),
            expect(per_partition),
            "{profile:?}"
        );
        // Epoch 1 for a partition a does not hold, or one b holds only since epoch 2.
        let theirs = b.member("b").assigned[0].1;
        assert_eq!(b.commit("a", 1, &[("t", theirs)], 2), STALE_MEMBER_EPOCH);
        b.heartbeat("c", 0, Some(&["t"]), None, None);
        b.ack("b");
        b.ack("b");
        let m = b.member("b");
        assert!(m.epoch == 3, "{m:?}");
        assert_eq!(
            b.commit("b", 2, &[("t", m.assigned[0].1)], 2),
            expect(per_partition),
            "{profile:?}: b holds it since epoch 2"
        );
        assert_eq!(
            b.commit("b", 1, &[("t", m.assigned[0].1)], 2),
            STALE_MEMBER_EPOCH,
            "{profile:?}: older than the partition's assignment epoch"
        );
        // A newer epoch than the member's is always stale.
        assert_eq!(b.commit("a", 5, &[("t", kept)], 2), STALE_MEMBER_EPOCH);
    }
}

#[test]
fn offset_fetch_checks_the_member_and_sees_only_committed_offsets() {
    let mut b = Broker::of(BrokerProfile::Kafka42);
    b.heartbeat("a", 0, Some(&["t"]), None, None);
    assert_eq!(fetched(&b.fetch_v9(Some("a"), 1, true)), (NONE, -1));
    assert_eq!(
        fetched(&b.fetch_v9(Some("zz"), 1, true)).0,
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        fetched(&b.fetch_v9(Some("a"), 7, true)).0,
        STALE_MEMBER_EPOCH
    );
    assert_eq!(fetched(&b.fetch_v9(None, -1, true)), (NONE, -1));
    assert_eq!(fetched(&b.fetch_v9(None, 1, true)).0, UNKNOWN_MEMBER_ID);
    b.wait_commits = false;
    // A commit whose records are not committed yet.
    let r = OffsetCommitRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_member_id(s("a"))
        .with_generation_id_or_member_epoch(1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(s("t")))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(42),
                ]),
        ]);
    assert!(b.send(9, RequestKind::OffsetCommit(r)).is_empty());
    // A read without RequireStable answers at once, from the committed offsets only.
    assert_eq!(fetched(&b.fetch_v9(Some("a"), 1, false)), (NONE, -1));
    // With RequireStable the answer waits for the commit, then shows it.
    assert!(b.fetch_v9(Some("a"), 1, true).is_empty());
    let replies = b.advance(Duration::from_millis(10));
    assert_eq!(
        replies.len(),
        2,
        "the commit's answer, then the fetch's: {replies:?}"
    );
    assert_eq!(fetched(&replies[1..]), (NONE, 42));
    assert_eq!(fetched(&b.fetch_v9(Some("a"), 1, false)), (NONE, 42));
}

#[test]
fn offset_fetch_is_answered_at_every_advertised_version() {
    let mut b = Broker::of(BrokerProfile::Kafka42);
    b.commit("", -1, &[("t", 0)], 7);
    for version in 1..=9i16 {
        for group in ["g", "other"] {
            let request = if version >= 8 {
                OffsetFetchRequest::default().with_groups(vec![
                    OffsetFetchRequestGroup::default()
                        .with_group_id(GroupId(s(group)))
                        .with_topics(Some(vec![
                            OffsetFetchRequestTopics::default()
                                .with_name(TopicName(s("t")))
                                .with_partition_indexes(vec![0, 1]),
                        ])),
                ])
            } else {
                OffsetFetchRequest::default()
                    .with_group_id(GroupId(s(group)))
                    .with_topics(Some(vec![
                        OffsetFetchRequestTopic::default()
                            .with_name(TopicName(s("t")))
                            .with_partition_indexes(vec![0, 1]),
                    ]))
            };
            let replies = b.send(version, RequestKind::OffsetFetch(request));
            let [
                Reply {
                    body: ResponseBody::Kafka(ResponseKind::OffsetFetch(r)),
                    ..
                },
            ] = &replies[..]
            else {
                panic!("v{version}: not one fetch answer: {replies:?}");
            };
            let mut buf = BytesMut::new();
            r.encode(&mut buf, version)
                .unwrap_or_else(|e| panic!("v{version} {group}: does not encode: {e}"));
            let (code, offsets) = read_fetch(r, version);
            if group == "g" {
                assert_eq!((code, offsets), (NONE, vec![7, -1]), "v{version}");
            } else {
                assert_eq!(code, NOT_COORDINATOR, "v{version}");
            }
        }
    }
}

/// The group error and partition offsets of an answer, as `OffsetFetchResponse.group` reads
/// them (v1: a group error is in the partitions).
fn read_fetch(r: &OffsetFetchResponse, version: i16) -> (i16, Vec<i64>) {
    if version >= 8 {
        let g = &r.groups[0];
        let offsets = g
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.committed_offset))
            .collect();
        return (g.error_code, offsets);
    }
    let parts: Vec<_> = r.topics.iter().flat_map(|t| &t.partitions).collect();
    let code = if version >= 2 {
        r.error_code
    } else {
        parts.first().map_or(NONE, |p| p.error_code)
    };
    if code != NONE {
        return (code, Vec::new());
    }
    (code, parts.iter().map(|p| p.committed_offset).collect())
}
