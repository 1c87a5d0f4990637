//! Classic-protocol members against the real Kafka 4.x broker: static membership, leaves,
//! assignors, commits.

mod common;

use std::time::{Duration, Instant};

use common::{TestMember, group_config, unique, wait_balanced};
use consumer_membership::GroupError;
use consumer_membership::machine::TopicPartition;
use consumer_membership::machine::events::MemberState;
use consumer_membership::machine::events::{CloseOptions, CommitError, CommitOffset};

const T: Duration = Duration::from_secs(30);

async fn topic(
    t: &impl consumer_membership::transport::Transport,
    prefix: &str,
    partitions: i32,
) -> String {
    let name = unique(prefix);
    common::create_topic(t, &name, partitions).await;
    name
}

/// Static restart of `which` (leader or follower): the other member sees no rebalance.
async fn static_restart(restart_leader: bool) {
    let Some(b) = common::bootstrap() else { return };
    let (t, _) = common::transport(&b);
    let topic = topic(&*t, "static", 4).await;
    let group = unique("static");
    let a = TestMember::start(
        common::transport(&b[..]).0,
        group_config(&group, Some("a")),
        &[&topic],
    )
    .await;
    a.wait_stable(None, T).await;
    let b2 = TestMember::start(
        common::transport(&b[..]).0,
        group_config(&group, Some("b")),
        &[&topic],
    )
    .await;
    let snaps = wait_balanced(&[&a, &b2], 4, T).await;
    let (victim, other) = if snaps[0].leader == restart_leader {
        (a, b2)
    } else {
        (b2, a)
    };
    let before = victim.snapshot().await;
    let other_before = other.snapshot().await;
    let other_seen_before = other.seen();
    assert_eq!(before.leader, restart_leader);
    let instance = if before.member_id.starts_with("a-") {
        "a"
    } else {
        "b"
    };

    // Close without LeaveGroup (static default), and restart "the process" at once.
    victim.handle.close(CloseOptions::Default).await;
    let started = Instant::now();
    let back = TestMember::start(
        common::transport(&b[..]).0,
        group_config(&group, Some(instance)),
        &[&topic],
    )
    .await;
    let again = back.wait_stable(Some(before.assignment.len()), T).await;
    println!(
        "static restart ({}) -> assignment back in {:?}",
        if restart_leader { "leader" } else { "follower" },
        started.elapsed()
    );
    assert_eq!(
        again.assignment, before.assignment,
        "the same partitions come back"
    );
    assert_eq!(again.generation, before.generation, "no new generation");
    // The other member saw no rebalance: same generation, one assignment event only.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let other_after = other.snapshot().await;
    assert_eq!(other_after.generation, other_before.generation);
    assert_eq!(other_after.assignment, other_before.assignment);
    let other_seen = other.seen();
    assert_eq!(
        other_seen.assigned_generations, other_seen_before.assigned_generations,
        "no new assignment"
    );
    assert_eq!(
        other_seen.revoked, other_seen_before.revoked,
        "nothing revoked"
    );
    assert_eq!(other_seen.lost, 0);
    assert!(back.seen().fatal.is_none());
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_follower_restart_keeps_partitions_without_rebalance() {
    static_restart(false).await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_leader_restart_keeps_partitions_without_rebalance() {
    static_restart(true).await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suppressed_leave_rejoin_carries_the_existing_member_id() {
    let Some(b) = common::bootstrap() else { return };
    let (t, config) = common::transport(&b);
    let topic = topic(&*t, "suppressed", 2).await;
    let group = unique("suppressed");
    let rec = common::Recorder::new(consumer_membership::transport::TcpTransport::new(config));
    let m = TestMember::start(rec.clone(), group_config(&group, Some("s1")), &[&topic]).await;
    let first = m.wait_stable(Some(2), T).await;
    m.handle.unsubscribe().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        m.snapshot().await.member_id,
        first.member_id,
        "kept after unsubscribe"
    );
    m.handle.subscribe([topic.clone()]).await.unwrap();
    let again = m.wait_stable(Some(2), T).await;
    let joins = rec.joins();
    let last = joins.last().expect("a JoinGroup after resubscribe");
    assert_eq!(
        last.member_id.as_str(),
        first.member_id,
        "JoinGroup carries the existing member id"
    );
    assert_eq!(again.member_id, first.member_id);
    assert!(m.seen().fatal.is_none(), "{:?}", m.seen().fatal);
    let leaves = rec.sent.lock().unwrap().iter().filter(|(_, r)| matches!(r, consumer_membership::request::Request::Raw { body, .. } if matches!(**body, kafka_protocol::messages::RequestKind::LeaveGroup(_)))).count();
    assert_eq!(leaves, 0, "no LeaveGroup from a static member");
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_instance_id_fences_exactly_one() {
    let Some(b) = common::bootstrap() else { return };
    let (t, _) = common::transport(&b);
    let topic = topic(&*t, "dup", 3).await;
    let group = unique("dup");
    let mut slow = group_config(&group, Some("same"));
    // A long heartbeat interval lets the first process commit before a heartbeat tells it.
    slow.session_timeout = Duration::from_secs(10);
    slow.heartbeat_interval = Duration::from_secs(9);
    let first = TestMember::start(common::transport(&b[..]).0, slow, &[&topic]).await;
    first.wait_stable(Some(3), T).await;
    let second = TestMember::start(
        common::transport(&b[..]).0,
        group_config(&group, Some("same")),
        &[&topic],
    )
    .await;
    second.wait_stable(Some(3), T).await;
    // The first process commits with its old member id: typed fencing error, not success.
    let r = first
        .handle
        .commit(vec![CommitOffset {
            partition: TopicPartition::new(&topic, 0),
            offset: 1,
            metadata: None,
        }])
        .await;
    match &r {
        Err(CommitError::FencedInstanceId { instance_id }) => assert_eq!(instance_id, "same"),
        Err(CommitError::Fatal(e)) => {
            assert!(matches!(e, GroupError::FencedInstanceId { .. }), "{e:?}")
        }
        other => panic!("commit from the fenced process: {other:?}"),
    }
    let deadline = Instant::now() + T;
    while first.seen().fatal.is_none() {
        assert!(Instant::now() < deadline, "first process never stopped");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        matches!(first.seen().fatal, Some(GroupError::FencedInstanceId { ref instance_id, .. }) if instance_id == "same")
    );
    // The second keeps the partitions and is not fenced.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let s = second.snapshot().await;
    assert_eq!((s.state, s.assignment.len()), (MemberState::Stable, 3));
    assert!(second.seen().fatal.is_none());
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_close_leaves_and_the_group_rebalances_at_once() {
    let Some(b) = common::bootstrap() else { return };
    let (t, _) = common::transport(&b);
    let topic = topic(&*t, "dyn", 4).await;
    let group = unique("dyn");
    let mut c = group_config(&group, None);
    c.session_timeout = Duration::from_secs(30); // a leave must not wait for this
    let a = TestMember::start(common::transport(&b[..]).0, c.clone(), &[&topic]).await;
    let b2 = TestMember::start(common::transport(&b[..]).0, c, &[&topic]).await;
    wait_balanced(&[&a, &b2], 4, T).await;
    let started = Instant::now();
    a.handle.close(CloseOptions::Default).await;
    b2.wait_stable(Some(4), Duration::from_secs(10)).await;
    let took = started.elapsed();
    println!("dynamic leave -> survivor owns everything in {took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(a.seen().closed);
}

/// 3 members x 12 partitions: disjoint, complete, balanced.
async fn three_members(assignor: &str) -> (Vec<TestMember>, String, String) {
    let b = common::bootstrap().unwrap();
    let b = b.as_str();
    let (t, _) = common::transport(b);
    let topic = topic(&*t, assignor, 12).await;
    let group = unique(assignor);
    let mut members = Vec::new();
    for i in 0..3 {
        let c = group_config(&group, Some(&format!("m{i}"))).with_assignors([
            consumer_membership::machine::classic::assignor::by_name(assignor)
                .expect("a built-in assignor"),
        ]);
        members.push(TestMember::start(common::transport(b).0, c, &[&topic]).await);
    }
    let refs: Vec<&TestMember> = members.iter().collect();
    let snaps = wait_balanced(&refs, 12, Duration::from_secs(60)).await;
    for s in &snaps {
        assert_eq!(s.assignment.len(), 4, "balanced: {snaps:?}");
    }
    (members, topic, group)
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn range_assigns_disjoint_and_complete() {
    if common::bootstrap().is_none() {
        return;
    }
    three_members("range").await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roundrobin_assigns_disjoint_and_complete() {
    if common::bootstrap().is_none() {
        return;
    }
    three_members("roundrobin").await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cooperative_sticky_fourth_member_never_revokes_a_staying_partition() {
    let Some(b) = common::bootstrap() else { return };
    let (members, topic, group) = three_members("cooperative-sticky").await;
    let revoked_before: Vec<usize> = members.iter().map(|m| m.seen().revoked.len()).collect();
    let before: Vec<_> = {
        let mut v = Vec::new();
        for m in &members {
            v.push(m.snapshot().await.assignment);
        }
        v
    };
    let (t, _) = common::transport(&b);
    let c = group_config(&group, Some("m3"))
        .with_assignor(consumer_membership::machine::classic::assignor::CooperativeSticky);
    let fourth = TestMember::start(t, c, &[&topic]).await;
    let mut all: Vec<&TestMember> = members.iter().collect();
    all.push(&fourth);
    let snaps = wait_balanced(&all, 12, Duration::from_secs(60)).await;
    for (i, m) in members.iter().enumerate() {
        let after: std::collections::BTreeSet<_> = snaps[i].assignment.iter().cloned().collect();
        // Only what this rebalance revoked (setting the group up may have moved partitions too).
        let revoked = m.seen().revoked[revoked_before[i]..].to_vec();
        for p in &revoked {
            assert!(
                !after.contains(p),
                "member {i} had {p} revoked although it kept it"
            );
        }
        // Only what moved to the new member was revoked.
        let moved: std::collections::BTreeSet<_> = before[i]
            .iter()
            .filter(|p| !after.contains(*p))
            .cloned()
            .collect();
        assert_eq!(
            revoked
                .iter()
                .cloned()
                .collect::<std::collections::BTreeSet<_>>(),
            moved,
            "member {i}"
        );
        assert_eq!(m.seen().lost, 0);
    }
    assert_eq!(snaps[3].assignment.len(), 3, "{snaps:?}");
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_then_fetch_round_trips() {
    let Some(b) = common::bootstrap() else { return };
    let (t, _) = common::transport(&b);
    let topic = topic(&*t, "commit", 2).await;
    let group = unique("commit");
    let m = TestMember::start(
        common::transport(&b[..]).0,
        group_config(&group, Some("c1")),
        &[&topic],
    )
    .await;
    m.wait_stable(Some(2), T).await;
    let offsets = vec![
        CommitOffset {
            partition: TopicPartition::new(&topic, 0),
            offset: 42,
            metadata: Some("meta".into()),
        },
        CommitOffset {
            partition: TopicPartition::new(&topic, 1),
            offset: 7,
            metadata: None,
        },
    ];
    m.handle.commit(offsets).await.expect("commit");
    let got = m
        .handle
        .committed(vec![
            TopicPartition::new(&topic, 0),
            TopicPartition::new(&topic, 1),
        ])
        .await
        .expect("fetch");
    assert_eq!(got[&TopicPartition::new(&topic, 0)].offset, Some(42));
    assert_eq!(
        got[&TopicPartition::new(&topic, 0)].metadata.as_deref(),
        Some("meta")
    );
    assert_eq!(got[&TopicPartition::new(&topic, 1)].offset, Some(7));
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_rebalances_when_a_subscribed_topic_appears() {
    let Some(b) = common::bootstrap() else { return };
    let (t, _) = common::transport(&b);
    let topic = unique("later");
    let group = unique("later");
    let m = TestMember::start(
        common::transport(&b).0,
        group_config(&group, None),
        &[&topic],
    )
    .await;
    let first = m.wait_stable(Some(0), T).await;
    common::create_topic(&*t, &topic, 3).await;
    let started = Instant::now();
    let s = m.wait_stable(Some(3), T).await;
    println!(
        "topic created -> partitions assigned in {:?}",
        started.elapsed()
    );
    assert!(s.generation > first.generation);
}
