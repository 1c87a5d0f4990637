//! A Java KafkaConsumer (Kafka's VerifiableConsumer, kafka-clients 4.4) and our classic member in
//! one group on the real broker: the assignment across both clients is disjoint and complete,
//! whichever client leads.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::java_peer::{self, JavaConsumer};
use common::{TestMember, group_config, unique};

const T: Duration = Duration::from_secs(60);

async fn mixed_group(assignor: &str, java_class: &str, rust_first: bool) {
    let Some(b) = common::bootstrap() else { return };
    let (t, _) = common::transport(&b);
    let topic = unique("interop");
    common::create_topic(&*t, &topic, 6).await;
    let group = unique("interop");
    let java = || {
        JavaConsumer::builder(&b, &topic, &group)
            .assignment_strategy(java_class)
            .session_timeout(Duration::from_secs(6))
            .property("heartbeat.interval.ms", "500")
            .spawn()
    };
    let config = group_config(&group, None).with_assignors([
        consumer_membership::machine::classic::assignor::by_name(assignor)
            .expect("a built-in assignor"),
    ]);
    let (rust, java) = if rust_first {
        let rust = TestMember::start(t, config, &[&topic]).await;
        rust.wait_stable(Some(6), T).await;
        (rust, java())
    } else {
        let java = java();
        assert!(
            java.wait_for(T, |a| a.len() == 6).await,
            "{}",
            java.report("java alone")
        );
        (TestMember::start(t, config, &[&topic]).await, java)
    };
    let all: BTreeSet<(String, i32)> = (0..6).map(|p| (topic.clone(), p)).collect();
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let ours: BTreeSet<(String, i32)> = rust
            .snapshot()
            .await
            .assignment
            .into_iter()
            .map(|tp| (tp.topic.to_string(), tp.partition))
            .collect();
        let theirs = java.assignment();
        let snap = rust.snapshot().await;
        let stable = snap.state == consumer_membership::machine::events::MemberState::Stable;
        if stable
            && !ours.is_empty()
            && !theirs.is_empty()
            && ours.is_disjoint(&theirs)
            && ours.union(&theirs).cloned().collect::<BTreeSet<_>>() == all
        {
            println!(
                "{assignor}: rust (leader: {}) {ours:?} java {theirs:?}",
                snap.leader
            );
            assert_eq!(snap.leader, rust_first, "the first client leads");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}\nrust: {ours:?} {:?}",
            java.report("not disjoint and complete"),
            rust.seen()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(rust.seen().fatal.is_none());
    java.stop_async().await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn range_with_a_java_consumer_rust_leads() {
    mixed_group("range", java_peer::RANGE, true).await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn range_with_a_java_consumer_java_leads() {
    mixed_group("range", java_peer::RANGE, false).await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cooperative_sticky_with_a_java_consumer_rust_leads() {
    mixed_group("cooperative-sticky", java_peer::COOPERATIVE_STICKY, true).await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cooperative_sticky_with_a_java_consumer_java_leads() {
    mixed_group("cooperative-sticky", java_peer::COOPERATIVE_STICKY, false).await;
}
