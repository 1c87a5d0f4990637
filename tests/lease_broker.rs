//! The membership lease against a real broker, per protocol: our member talks to the broker
//! through the TCP fault proxy of tests/common/proxy.rs, another member of the group directly.
//! The proxy then drops every answer to our member (its requests still reach the broker) for
//! longer than the session timeout: the broker expires our member and gives its partitions to
//! the other one. At no instant of the merged event history of both members may one partition
//! be owned by both (each member's ownership as its application saw it). Then the answers
//! flow again and our member rejoins. The test prints the time from the fault to our Lost and
//! to the other member's takeover.
//!
//! For the record, the same fault with a Java `KafkaConsumer` behind the proxy and our member
//! as the other one (`java_behind_the_proxy`): the Java client has no lease, so the partitions
//! it still reports owned when the broker gives them to our member are owned by both until it
//! hears it was fenced (classic, eager assignor: or revokes them for a rejoin of its own). Those
//! tests print the window instead of asserting it away.
//!
//! Run with `tests/kafka/with-broker.sh cargo test --all-features --test lease_broker`
//! (single.properties.in: `group.consumer.session.timeout.ms=6000`, heartbeat 500 ms).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::java_peer::{self, JavaConsumer};
use common::proxy::{Proxy, What};
use common::{TestMember, create_topic, group_config, transport, unique};
use consumer_membership::TcpTransport;
use consumer_membership::config::GroupProtocol;
use consumer_membership::machine::TopicPartition;
use consumer_membership::machine::events::MemberState;
use kafka_protocol::messages::ApiKey;

/// The broker's consumer-protocol session (single.properties.in) and the classic session the
/// members ask for (`common::group_config`, heartbeat 500 ms).
const SESSION: Duration = Duration::from_secs(6);
const PARTITIONS: i32 = 4;

/// The Java client's classic defaults: `session.timeout.ms` 45 s, `heartbeat.interval.ms` 3 s.
const JAVA_SESSION: Duration = Duration::from_secs(45);
const JAVA_HEARTBEAT: Duration = Duration::from_secs(3);

/// (when, owned?, partition): one change of ownership as a member's application saw it.
type Ownership = (Instant, bool, TopicPartition);

/// Every stretch during which a partition was owned by both members, from their ownership
/// logs: (partition, from, until; `None` while both still own it).
fn double_ownership(
    a: &[Ownership],
    b: &[Ownership],
) -> Vec<(TopicPartition, Instant, Option<Instant>)> {
    let mut log: Vec<(Instant, usize, bool, TopicPartition)> = Vec::new();
    for (who, l) in [(0, a), (1, b)] {
        for (at, owned, tp) in l {
            log.push((*at, who, *owned, tp.clone()));
        }
    }
    // Releases before acquisitions at one instant.
    log.sort_by_key(|(at, who, owned, _)| (*at, *owned, *who));
    let mut owners: BTreeMap<TopicPartition, BTreeSet<usize>> = BTreeMap::new();
    let mut found: Vec<(TopicPartition, Instant, Option<Instant>)> = Vec::new();
    for (at, who, owned, tp) in log {
        let set = owners.entry(tp.clone()).or_default();
        let both = set.len() > 1;
        if owned {
            set.insert(who);
        } else {
            set.remove(&who);
        }
        match (both, set.len() > 1) {
            (false, true) => found.push((tp, at, None)),
            (true, false) => {
                if let Some(open) = found.iter_mut().rev().find(|(p, _, _)| *p == tp) {
                    open.2 = Some(at);
                }
            }
            _ => {}
        }
    }
    found
}

/// When the member whose ownership `log` is first took one of `partitions` after `fault` (it
/// may have owned them before the faulty member joined).
fn taken_at(log: &[Ownership], fault: Instant, partitions: &BTreeSet<TopicPartition>) -> Instant {
    log.iter()
        .filter(|(at, owned, tp)| *at >= fault && *owned && partitions.contains(tp))
        .map(|(at, _, _)| *at)
        .min()
        .expect("a partition taken after the fault")
}

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
    let before: BTreeSet<TopicPartition> = before.assignment.into_iter().collect();
    let took_at = taken_at(&took.ownership_log, fault, &before);
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
    let doubles = double_ownership(&back.ownership_log, &other_seen.ownership_log);
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

/// How long the answers stay lost after the other member took the Java consumer's partitions.
const HOLD: Duration = Duration::from_secs(5);

/// The Java consumer's partitions as ours names them.
fn java_partitions(tps: impl IntoIterator<Item = java_peer::Tp>) -> BTreeSet<TopicPartition> {
    tps.into_iter()
        .map(|(topic, partition)| TopicPartition::new(topic, partition))
        .collect()
}

/// The partitions `log` shows owned at `at`.
fn owned_at(log: &[Ownership], at: Instant) -> BTreeSet<TopicPartition> {
    let mut owned = BTreeSet::new();
    for (_, o, tp) in log.iter().take_while(|(when, _, _)| *when <= at) {
        if *o {
            owned.insert(tp.clone());
        } else {
            owned.remove(tp);
        }
    }
    owned
}

/// The same fault with a Java `KafkaConsumer` (VerifiableConsumer with the client's defaults:
/// classic session 45 s, heartbeat 3 s, request timeout 30 s; the consumer protocol takes the
/// broker's 6 s session) behind the proxy, and our member as the other one, connected directly.
/// The answers stay lost until `HOLD` after our member took the Java consumer's partitions.
///
/// The Java client has no lease: it reports its partitions gone when an answer tells it it was
/// fenced, or (classic, eager assignor) when it revokes them for a rejoin of its own, e.g. after
/// its metadata changed when its requests timed out. The test checks that the fault reached the
/// Java consumer's heartbeats, that the broker gave its partitions to our member, that the
/// double-ownership check finds exactly the partitions Java still reported owned at that
/// instant, and, for the consumer protocol, that those were all of them; it prints the times.
async fn java_behind_the_proxy(protocol: GroupProtocol) {
    let Some(bootstrap) = common::bootstrap() else {
        return;
    };
    let (java_protocol, session) = match protocol {
        GroupProtocol::Classic => (java_peer::GroupProtocol::Classic, JAVA_SESSION),
        _ => (java_peer::GroupProtocol::Consumer, SESSION),
    };
    let all = PARTITIONS as usize;
    let topic = unique("lease-java");
    let group = unique("lease-java-group");
    let (direct, _) = transport(&bootstrap);
    create_topic(direct.as_ref(), &topic, PARTITIONS).await;

    let proxy = Proxy::start(&bootstrap).await.expect("proxy");
    let java = JavaConsumer::builder(proxy.bootstrap(), &topic, &group)
        .protocol(java_protocol)
        .spawn();
    let assigned = |n: usize, what: &'static str| {
        let java = &java;
        async move {
            assert!(
                java.wait_for(Duration::from_secs(90), |a| a.len() == n)
                    .await,
                "{}",
                java.report(what)
            );
        }
    };
    assigned(all, "not assigned every partition").await;
    let mut config = group_config(&group, Some("lease-other"));
    config.protocol = protocol;
    config.group_session_timeout = SESSION;
    let other = TestMember::start(direct, config, &[&topic]).await;
    other
        .wait_stable(Some(all / 2), Duration::from_secs(60))
        .await;
    assigned(all / 2, "not assigned half the partitions").await;
    let before = java_partitions(java.assignment());

    let fault = Instant::now();
    let from = proxy.records_len();
    proxy.note("answers lost from now on");
    proxy.drop_all_answers(true);
    let took = other.wait_seen(session * 3, |s| s.owned.len() == all).await;
    let took_at = taken_at(&took.ownership_log, fault, &before);
    tokio::time::sleep_until((took_at + HOLD).into()).await;
    proxy.note("answers flow again");
    proxy.drop_all_answers(false);
    let restored = Instant::now();

    // Java reports every partition it had gone (revoked or lost), and rejoins.
    let deadline = Instant::now() + Duration::from_secs(120);
    let released_at = loop {
        let log = java_ownership(&java);
        let gone: Vec<Instant> = before
            .iter()
            .filter_map(|tp| {
                log.iter()
                    .find(|(at, o, p)| *at >= fault && !o && p == tp)
                    .map(|(at, _, _)| *at)
            })
            .collect();
        if gone.len() == before.len() {
            break gone.into_iter().max().expect("partitions");
        }
        assert!(
            Instant::now() < deadline && !java.exited(),
            "{}\n{}",
            java.report("kept its partitions"),
            proxy.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        java.wait_for(Duration::from_secs(90), |a| !a.is_empty())
            .await,
        "{}",
        java.report("did not rejoin")
    );
    let back = other
        .wait_seen(Duration::from_secs(60), |s| s.owned.len() < all)
        .await;
    let s = other.snapshot().await;
    assert_ne!(s.state, MemberState::Fatal, "{s:?}");

    // The fault reached the Java consumer's heartbeats: they went on reaching the broker, their
    // answers were lost.
    let heartbeat = if protocol == GroupProtocol::Classic {
        ApiKey::Heartbeat
    } else {
        ApiKey::ConsumerGroupHeartbeat
    };
    let records = proxy.records();
    let (noted, after) = records[from..].split_first().expect("the note");
    let lost_answers = after
        .iter()
        .filter(|r| r.what == What::AnswerDropped && r.api == Some(heartbeat))
        .count();
    assert!(
        lost_answers > 0,
        "no heartbeat answer lost\n{}",
        proxy.log_text()
    );
    // The last heartbeat that reached the broker before the takeover.
    let took_in_proxy = noted.at + (took_at - fault);
    let last_heartbeat = after
        .iter()
        .filter(|r| r.what == What::Forwarded && r.api == Some(heartbeat) && r.at < took_in_proxy)
        .map(|r| r.at - noted.at)
        .max()
        .unwrap_or_default();

    // Beside the Java consumer's log, for a look at what it sent when.
    let proxy_log = java.stderr_path().with_extension("proxy.log");
    std::fs::write(&proxy_log, proxy.log_text()).expect("write the proxy log");

    let java_log = java_ownership(&java);
    let kept = owned_at(&java_log, took_at);
    let doubles: Vec<_> = double_ownership(&java_log, &back.ownership_log)
        .into_iter()
        .filter(|(_, from, _)| *from >= fault)
        .collect();
    let doubled: BTreeSet<TopicPartition> = doubles.iter().map(|(tp, _, _)| tp.clone()).collect();
    assert_eq!(doubled, kept, "{doubles:?}\n{}", java.report("ownership"));
    let window = doubles
        .iter()
        .map(|(_, from, until)| until.unwrap_or_else(Instant::now) - *from)
        .max()
        .unwrap_or_default();
    let why = if released_at >= restored {
        format!(
            "{:?} after the answers flowed again",
            released_at - restored
        )
    } else {
        "before any answer came back, on its own: its log says why".to_owned()
    };
    println!(
        "Java {protocol}: its last heartbeat reached the broker {last_heartbeat:?} after the fault ({lost_answers} heartbeat answers lost); the other member took its partitions {:?} after the fault, Java reported them gone {:?} after it ({why}; answers back {HOLD:?} after the takeover): owned by both for {window:?} (proxy log: {})",
        took_at - fault,
        released_at - fault,
        proxy_log.display(),
    );
    if protocol == GroupProtocol::Consumer {
        assert_eq!(
            kept,
            before,
            "{}",
            java.report("released before the takeover")
        );
    }
    java.stop_async().await;
}

/// The Java consumer's ownership log, in our partitions.
fn java_ownership(java: &JavaConsumer) -> Vec<Ownership> {
    java.ownership_log()
        .into_iter()
        .map(|(at, owned, (topic, partition))| (at, owned, TopicPartition::new(topic, partition)))
        .collect()
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_java_consumer_with_its_default_timeouts_measured_behind_lost_answers() {
    java_behind_the_proxy(GroupProtocol::Classic).await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_java_consumer_keeps_its_partitions_past_the_takeover() {
    java_behind_the_proxy(GroupProtocol::Consumer).await;
}
