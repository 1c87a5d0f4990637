//! The membership lease against a real broker, per protocol: our member talks to the broker
//! through the TCP fault proxy of tests/common/proxy.rs, another member of the group directly.
//! The proxy then drops every answer to our member (its requests still reach the broker) for
//! longer than the session timeout: the broker expires our member and gives its partitions to
//! the other one. At no instant of the merged event history of both members may one partition
//! be owned by both (each member's ownership as its application saw it). Then the answers
//! flow again and our member rejoins. The test prints the time from the fault to our Lost and
//! to the other member's takeover.
//!
//! Run with `tests/kafka/with-broker.sh cargo test --all-features --test lease_broker`
//! (single.properties.in: `group.consumer.session.timeout.ms=6000`, heartbeat 500 ms).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::ownership::double_ownership;
use common::proxy::Proxy;
use common::{TestMember, create_topic, group_config, transport, unique};
use consumer_membership::TcpTransport;
use consumer_membership::config::GroupProtocol;
use consumer_membership::machine::events::MemberState;

/// The broker's consumer-protocol session (single.properties.in) and the classic session the
/// members ask for (`common::group_config`, heartbeat 500 ms).
const SESSION: Duration = Duration::from_secs(6);
const PARTITIONS: i32 = 4;

/// The Java client's classic defaults: `session.timeout.ms` 45 s, `heartbeat.interval.ms` 3 s.
const JAVA_SESSION: Duration = Duration::from_secs(45);
const JAVA_HEARTBEAT: Duration = Duration::from_secs(3);

/// `classic`: the classic members' (session, heartbeat interval), `None` for
/// `common::group_config`'s. `read`: the consumer members assume Kafka's default 45 s and read
/// the group's session timeout from the broker (DescribeConfigs) instead of being told 6 s.
async fn run(protocol: GroupProtocol, classic: Option<(Duration, Duration)>, read: bool) {
    let session = classic.map_or(SESSION, |(s, _)| s);
    let Some(bootstrap) = common::bootstrap() else {
        return;
    };
    let topic = unique("lease");
    let group = unique("lease-group");
    let (admin, _) = transport(&bootstrap);
    create_topic(admin.as_ref(), &topic, PARTITIONS).await;

    let proxy = Proxy::start(&bootstrap).await.expect("proxy");
    let config = |instance: &str| {
        let mut c = group_config(&group, Some(instance));
        c.protocol = protocol;
        c.group_session_timeout = if read { JAVA_SESSION } else { SESSION };
        c.read_group_session_timeout = read;
        if let Some((session, heartbeat)) = classic {
            c.session_timeout = session;
            c.heartbeat_interval = heartbeat;
            c.max_poll_interval = session * 4;
        }
        c
    };
    let (through_proxy, _) = transport(proxy.bootstrap());
    let ours = TestMember::start(through_proxy, config("lease-ours"), &[&topic]).await;
    let (direct, _) = transport(&bootstrap);
    let other: TestMember =
        TestMember::start::<TcpTransport>(direct, config("lease-other"), &[&topic]).await;
    let half = Some(PARTITIONS as usize / 2);
    ours.wait_stable(half, Duration::from_secs(60)).await;
    other.wait_stable(half, Duration::from_secs(60)).await;
    let before = ours.snapshot().await;

    // Every answer to our member is lost from now on; its requests still reach the broker.
    let fault = Instant::now();
    proxy.drop_all_answers(true);
    let lost = ours
        .wait_seen(session * 3, |s| s.lost > 0 && s.owned.is_empty())
        .await;
    let lost_at = lost
        .ownership_log
        .iter()
        .rev()
        .find(|(_, owned, _)| !owned)
        .map(|(at, _, _)| *at)
        .unwrap();
    let took = other
        .wait_seen(session * 5, |s| s.owned.len() == PARTITIONS as usize)
        .await;
    let took_at = took
        .ownership_log
        .iter()
        // Only what it took after the fault (it may have owned them before ours joined).
        .filter(|(at, owned, tp)| *at >= fault && *owned && before.assignment.contains(tp))
        .map(|(at, _, _)| *at)
        .min()
        .unwrap();
    println!(
        "{protocol} (session read: {read}): lease Lost {:?} after the fault, the other member took our partitions {:?} after it",
        lost_at - fault,
        took_at - fault
    );
    assert!(lost_at <= took_at, "lost after the takeover");

    // The answers flow again: our member rejoins.
    proxy.drop_all_answers(false);
    let back = ours
        .wait_seen(Duration::from_secs(60), |s| !s.owned.is_empty())
        .await;
    let s = ours.snapshot().await;
    assert_ne!(s.state, MemberState::Fatal, "{s:?}");
    let other_seen = other
        .wait_seen(Duration::from_secs(60), |s| {
            s.owned.len() < PARTITIONS as usize
        })
        .await;
    let doubles = double_ownership(&[&back.ownership_log, &other_seen.ownership_log]);
    assert!(doubles.is_empty(), "{doubles:?}\n{}", proxy.log_text());
    let _ = Arc::strong_count(&admin);
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_member_loses_its_partitions_before_the_broker_reassigns_them() {
    run(GroupProtocol::Classic, None, false).await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_member_with_the_java_default_timeouts_loses_its_partitions_first() {
    run(
        GroupProtocol::Classic,
        Some((JAVA_SESSION, JAVA_HEARTBEAT)),
        false,
    )
    .await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_member_loses_its_partitions_before_the_broker_reassigns_them() {
    run(GroupProtocol::Consumer, None, false).await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_member_reads_the_group_session_timeout_from_the_broker() {
    run(GroupProtocol::Consumer, None, true).await;
}
