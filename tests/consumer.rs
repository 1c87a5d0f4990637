//! KIP-848 consumer-protocol members against the real Kafka 4.x broker.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Recorder, TestMember, unique, wait_balanced};
use consumer_membership::config::{GroupConfig, GroupProtocol};
use consumer_membership::error::TransportError;
use consumer_membership::machine::TopicPartition;
use consumer_membership::machine::events::MemberState;
use consumer_membership::machine::events::{CloseOptions, CommitOffset};
use consumer_membership::request::{Request, Response, Target};
use consumer_membership::transport::{TcpTransport, Transport};
use kafka_protocol::messages::RequestKind;

const T: Duration = Duration::from_secs(30);

fn config(group: &str, instance: Option<&str>) -> GroupConfig {
    let mut c = common::group_config(group, instance);
    c.protocol = GroupProtocol::Consumer;
    c
}

async fn topic(b: &str, prefix: &str, partitions: i32) -> String {
    let (t, _) = common::transport(b);
    let name = unique(prefix);
    common::create_topic(&*t, &name, partitions).await;
    name
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_sends_the_generated_id_at_epoch_zero_and_reaches_stable() {
    let Some(b) = common::bootstrap() else { return };
    let topic = topic(&b, "join848", 3).await;
    let group = unique("join848");
    let (t, c) = common::transport(&b);
    drop(t);
    let rec = Recorder::new(TcpTransport::new(c));
    let started = Instant::now();
    let m = TestMember::start(rec.clone(), config(&group, None), &[&topic]).await;
    let s = m.wait_stable(Some(3), T).await;
    println!("KIP-848 join -> 3 partitions in {:?}", started.elapsed());
    assert!(s.generation > 0, "epoch {}", s.generation);
    assert_eq!(s.protocol, GroupProtocol::Consumer);
    let first = rec
        .sent
        .lock()
        .unwrap()
        .iter()
        .find_map(|(_, r)| match r {
            Request::Raw { body, .. } => match &**body {
                RequestKind::ConsumerGroupHeartbeat(h) => Some(h.clone()),
                _ => None,
            },
            _ => None,
        })
        .expect("a heartbeat");
    assert_eq!(first.member_epoch, 0);
    assert_eq!(first.member_id.len(), 22);
    assert!(
        first
            .member_id
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_')
    );
    assert_eq!(first.member_id.as_str(), s.member_id);
    assert_eq!(
        common::described_members(&b, &group).await,
        vec![s.member_id.clone()]
    );
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fourth_member_moves_partitions_revoke_before_assign() {
    let Some(b) = common::bootstrap() else { return };
    let topic = topic(&b, "four848", 12).await;
    let group = unique("four848");
    let mut members = Vec::new();
    for _ in 0..3 {
        members.push(
            TestMember::start(common::transport(&b).0, config(&group, None), &[&topic]).await,
        );
    }
    let refs: Vec<&TestMember> = members.iter().collect();
    let snaps = wait_balanced(&refs, 12, Duration::from_secs(60)).await;
    assert!(snaps.iter().all(|s| s.assignment.len() == 4), "{snaps:?}");
    members.push(TestMember::start(common::transport(&b).0, config(&group, None), &[&topic]).await);
    // The newcomer is Stable with nothing at first: its partitions come once the others revoked.
    members[3]
        .wait_stable(Some(3), Duration::from_secs(60))
        .await;
    let refs: Vec<&TestMember> = members.iter().collect();
    let snaps = wait_balanced(&refs, 12, Duration::from_secs(60)).await;
    assert!(snaps.iter().all(|s| s.assignment.len() == 3), "{snaps:?}");
    // Global check over every member's event log: no instant where two members own a partition.
    let mut timeline: Vec<(Instant, usize, bool, TopicPartition)> = Vec::new();
    for (i, m) in members.iter().enumerate() {
        for (at, owned, tp) in m.seen().ownership_log {
            timeline.push((at, i, owned, tp));
        }
    }
    assert!(
        timeline.len() >= 12 + 3,
        "every assignment and move is logged: {timeline:?}"
    );
    timeline.sort_by_key(|e| (e.0, e.2)); // at the same instant, releases (false) first
    let mut owner: BTreeMap<TopicPartition, usize> = BTreeMap::new();
    for (_, who, owned, tp) in timeline {
        if owned {
            if let Some(prev) = owner.insert(tp.clone(), who) {
                panic!("{tp} owned by {prev} and {who} at once");
            }
        } else {
            owner.remove(&tp);
        }
    }
    for m in &members {
        assert_eq!(m.seen().lost, 0);
    }
}

/// A transport that loses the answer to the first ConsumerGroupHeartbeat (the request reaches
/// the broker; the client sees a disconnect).
struct LoseFirstAnswer {
    inner: TcpTransport,
    lost: std::sync::atomic::AtomicBool,
}

impl Transport for LoseFirstAnswer {
    async fn send(
        &self,
        target: Target,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, TransportError> {
        let heartbeat = matches!(&request, Request::Raw { body, .. } if matches!(**body, RequestKind::ConsumerGroupHeartbeat(_)));
        let r = self.inner.send(target, request, timeout).await;
        if heartbeat && !self.lost.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err(TransportError::Disconnected {
                addr: "test".into(),
                reason: "answer lost".into(),
            });
        }
        r
    }
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_first_answer_leaves_no_ghost_member() {
    let Some(b) = common::bootstrap() else { return };
    let topic = topic(&b, "ghost848", 2).await;
    for instance in [None, Some("static-ghost")] {
        let group = unique("ghost848");
        let (_, c) = common::transport(&b);
        let t = Arc::new(LoseFirstAnswer {
            inner: TcpTransport::new(c),
            lost: false.into(),
        });
        let m = TestMember::start(t, config(&group, instance), &[&topic]).await;
        let s = m.wait_stable(Some(2), T).await;
        let listed = common::described_members(&b, &group).await;
        assert_eq!(
            listed,
            vec![s.member_id.clone()],
            "exactly one member ({instance:?})"
        );
        assert!(m.seen().fatal.is_none(), "{:?}", m.seen().fatal);
    }
}

/// A transport that holds ConsumerGroupHeartbeat answers until released (the request is sent).
struct SlowAnswers {
    inner: TcpTransport,
    delay: Duration,
}

impl Transport for SlowAnswers {
    async fn send(
        &self,
        target: Target,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, TransportError> {
        let join = matches!(&request, Request::Raw { body, .. } if matches!(&**body, RequestKind::ConsumerGroupHeartbeat(h) if h.member_epoch == 0));
        let r = self.inner.send(target, request, timeout).await;
        if join {
            tokio::time::sleep(self.delay).await;
        }
        r
    }
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_before_the_first_answer_still_leaves() {
    let Some(b) = common::bootstrap() else { return };
    let topic = topic(&b, "early848", 2).await;
    // Dynamic: the group is empty right after close, not after the session timeout.
    let group = unique("early848");
    let (_, c) = common::transport(&b);
    let t = Arc::new(SlowAnswers {
        inner: TcpTransport::new(c.clone()),
        delay: Duration::from_secs(3),
    });
    let m = TestMember::start(t, config(&group, None), &[&topic]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(m.snapshot().await.generation, 0, "no answer yet");
    m.handle.close(CloseOptions::Default).await;
    let listed = common::described_members(&b, &group).await;
    assert!(listed.is_empty(), "ghost member after close: {listed:?}");

    // Static: the -2 leave lands; the same instance id rejoins at once.
    let group = unique("early848s");
    let t = Arc::new(SlowAnswers {
        inner: TcpTransport::new(c),
        delay: Duration::from_secs(3),
    });
    let m = TestMember::start(t, config(&group, Some("early")), &[&topic]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    m.handle.close(CloseOptions::Default).await;
    let again = TestMember::start(
        common::transport(&b).0,
        config(&group, Some("early")),
        &[&topic],
    )
    .await;
    let s = again.wait_stable(Some(2), T).await;
    assert!(again.seen().fatal.is_none(), "{:?}", again.seen().fatal);
    assert_eq!(
        common::described_members(&b, &group).await,
        vec![s.member_id]
    );
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_restart_gets_the_same_partitions_back() {
    let Some(b) = common::bootstrap() else { return };
    let topic = topic(&b, "static848", 4).await;
    let group = unique("static848");
    let a = TestMember::start(
        common::transport(&b).0,
        config(&group, Some("a")),
        &[&topic],
    )
    .await;
    let other = TestMember::start(
        common::transport(&b).0,
        config(&group, Some("b")),
        &[&topic],
    )
    .await;
    wait_balanced(&[&a, &other], 4, T).await;
    let before = a.wait_stable(Some(2), T).await;
    let other_before = other.snapshot().await.assignment;
    let other_revoked_before = other.seen().revoked.len();
    a.handle.close(CloseOptions::Default).await; // -2
    let started = Instant::now();
    let back = TestMember::start(
        common::transport(&b).0,
        config(&group, Some("a")),
        &[&topic],
    )
    .await;
    let s = back.wait_stable(Some(2), T).await;
    println!(
        "KIP-848 static restart -> assignment back in {:?}",
        started.elapsed()
    );
    assert_eq!(s.assignment, before.assignment);
    assert_ne!(
        s.member_id, before.member_id,
        "a new process has a new member id"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        other.snapshot().await.assignment,
        other_before,
        "the other member's assignment did not change"
    );
    assert_eq!(
        other.seen().revoked.len(),
        other_revoked_before,
        "nothing revoked from the other member"
    );
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_and_fetch_with_member_epoch() {
    let Some(b) = common::bootstrap() else { return };
    let topic = topic(&b, "commit848", 2).await;
    let group = unique("commit848");
    let m = TestMember::start(common::transport(&b).0, config(&group, None), &[&topic]).await;
    m.wait_stable(Some(2), T).await;
    let tp = TopicPartition::new(&topic, 1);
    m.handle
        .commit(vec![CommitOffset {
            partition: tp.clone(),
            offset: 99,
            metadata: None,
        }])
        .await
        .expect("commit");
    let got = m.handle.committed(vec![tp.clone()]).await.expect("fetch");
    assert_eq!(got[&tp].offset, Some(99));
    let all: BTreeSet<_> = m.snapshot().await.assignment.into_iter().collect();
    assert!(all.contains(&tp));
}

/// A transport that holds ConsumerGroupHeartbeat requests back (not sent) while `stalled`.
struct Stall {
    inner: TcpTransport,
    stalled: Arc<std::sync::atomic::AtomicBool>,
}

impl Transport for Stall {
    async fn send(
        &self,
        target: Target,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, TransportError> {
        let heartbeat = matches!(&request, Request::Raw { body, .. } if matches!(**body, RequestKind::ConsumerGroupHeartbeat(_)));
        while heartbeat && self.stalled.load(std::sync::atomic::Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.inner.send(target, request, timeout).await
    }
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_expiry_fences_then_the_member_rejoins_with_the_same_id() {
    let Some(b) = common::bootstrap() else { return };
    let topic = topic(&b, "fence848", 2).await;
    let group = unique("fence848");
    let (_, c) = common::transport(&b);
    let stalled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let t = Arc::new(Stall {
        inner: TcpTransport::new(c),
        stalled: stalled.clone(),
    });
    let m = TestMember::start(t, config(&group, None), &[&topic]).await;
    let before = m.wait_stable(Some(2), T).await;
    // No heartbeat reaches the broker for longer than its session timeout (6 s in tests/kafka).
    stalled.store(true, std::sync::atomic::Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !common::described_members(&b, &group).await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the broker never expired the member"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    stalled.store(false, std::sync::atomic::Ordering::SeqCst);
    let after = m.wait_stable(Some(2), T).await;
    let seen = m.wait_seen(T, |s| s.lost >= 1 && s.owned.len() == 2).await;
    assert_eq!(seen.lost, 1, "partitions reported lost once: {seen:?}");
    assert_eq!(
        after.member_id, before.member_id,
        "same member id after fencing"
    );
    assert!(seen.fatal.is_none());
    assert_eq!(
        common::described_members(&b, &group).await,
        vec![before.member_id]
    );
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_consumer_protocol_member_in_the_same_group() {
    use common::java_peer::{GroupProtocol as JavaProtocol, JavaConsumer};
    let Some(b) = common::bootstrap() else { return };
    let topic = topic(&b, "java848", 6).await;
    let group = unique("java848");
    let ours = TestMember::start(common::transport(&b).0, config(&group, None), &[&topic]).await;
    ours.wait_stable(Some(6), T).await;
    let java = JavaConsumer::builder(&b, &topic, &group)
        .protocol(JavaProtocol::Consumer)
        .spawn();
    let all: BTreeSet<(String, i32)> = (0..6).map(|p| (topic.clone(), p)).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = ours.snapshot().await;
        let mine: BTreeSet<(String, i32)> = s
            .assignment
            .iter()
            .map(|tp| (tp.topic.to_string(), tp.partition))
            .collect();
        let theirs = java.assignment();
        if s.state == MemberState::Stable
            && !mine.is_empty()
            && !theirs.is_empty()
            && mine.is_disjoint(&theirs)
            && mine.union(&theirs).cloned().collect::<BTreeSet<_>>() == all
        {
            println!("KIP-848 with Java: ours {mine:?} java {theirs:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}\nours: {s:?}",
            java.report("not disjoint and complete")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    java.stop_async().await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_and_consumer_members_in_one_group() {
    let Some(b) = common::bootstrap() else { return };
    let topic = topic(&b, "mixed848", 6).await;
    let group = unique("mixed848");
    // The group starts classic; a consumer-protocol member joining upgrades it online
    // (group.consumer.migration.policy=bidirectional, the broker default).
    let classic = TestMember::start(
        common::transport(&b).0,
        common::group_config(&group, Some("old")),
        &[&topic],
    )
    .await;
    classic.wait_stable(Some(6), T).await;
    let modern = TestMember::start(
        common::transport(&b).0,
        config(&group, Some("new")),
        &[&topic],
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (a, m) = (classic.snapshot().await, modern.snapshot().await);
        let x: BTreeSet<TopicPartition> = a.assignment.iter().cloned().collect();
        let y: BTreeSet<TopicPartition> = m.assignment.iter().cloned().collect();
        if a.state == MemberState::Stable
            && m.state == MemberState::Stable
            && !x.is_empty()
            && !y.is_empty()
            && x.is_disjoint(&y)
            && x.len() + y.len() == 6
        {
            println!(
                "mixed group: classic {} partitions (generation {}), consumer {} (epoch {})",
                x.len(),
                a.generation,
                y.len(),
                m.generation
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "classic {a:?} {:?}\nconsumer {m:?} {:?}",
            classic.seen(),
            modern.seen()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(classic.seen().fatal.is_none() && modern.seen().fatal.is_none());
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regex_subscription_with_a_server_assignor() {
    let Some(b) = common::bootstrap() else { return };
    let prefix = unique("rx848");
    let (t, _) = common::transport(&b);
    for suffix in ["a", "b"] {
        common::create_topic(&*t, &format!("{prefix}-{suffix}"), 2).await;
    }
    common::create_topic(&*t, &format!("other-{prefix}"), 2).await;
    let group = unique("rx848");
    let mut c = config(&group, None);
    c.remote_assignor = Some("range".into());
    let pattern = format!("{}-.*", prefix.replace('-', "\\-"));
    let m = TestMember::start_regex(common::transport(&b).0, c, &pattern).await;
    let s = m.wait_stable(Some(4), Duration::from_secs(60)).await;
    let topics: BTreeSet<String> = s.assignment.iter().map(|tp| tp.topic.to_string()).collect();
    assert_eq!(
        topics,
        BTreeSet::from([format!("{prefix}-a"), format!("{prefix}-b")]),
        "only the matching topics"
    );
    // The classic protocol cannot subscribe by pattern: typed misuse, not silence.
    let classic = consumer_membership::driver::GroupMember::start(
        common::transport(&b).0,
        common::group_config(&unique("rxc"), None),
    )
    .unwrap();
    assert_eq!(
        classic.subscribe_regex("x.*").await,
        Err(consumer_membership::error::ApiMisuse::RegexNeedsConsumerProtocol)
    );
}
