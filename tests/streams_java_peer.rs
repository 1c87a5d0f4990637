//! Java Kafka Streams 4.4 applications (tests/kafka/StreamsPeer.java, `group.protocol=streams`)
//! in one streams group on the real broker: the harness that the Rust streams member joins
//! later (tests/common/streams_peer.rs). Two processes with `streams.num.standby.replicas=1`
//! split the tasks of both subtopologies (each active exactly once, standbys never on the
//! process holding the active), StreamsGroupDescribe lists both with their process ids, and a
//! static member restarted within the session timeout gets its tasks back while the other
//! keeps its own.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::streams_peer::{
    self, GroupDescription, PeerStatus, StreamsPeer, check_split, expected_tasks,
};
use common::unique;

const PARTITIONS: i32 = 4;

/// The broker's address, or None (the test passes vacuously, saying so) when with-broker.sh
/// runs a release before 4.4: streams groups came with 4.1 (GA 4.2), static streams members
/// (KAFKA-20169) with 4.4, and the Java peer runs the broker's release.
fn broker() -> Option<String> {
    let b = common::bootstrap()?;
    let version = std::env::var("KAFKA_VERSION").unwrap_or_default();
    let line: Vec<u32> = version
        .split('.')
        .take(2)
        .filter_map(|p| p.parse().ok())
        .collect();
    if line.len() == 2 && (line[0], line[1]) < (4, 4) {
        eprintln!("skipped: Kafka {version} has no static streams members (4.4)");
        return None;
    }
    Some(b)
}
const T: Duration = Duration::from_secs(90);

/// The stateful subtopology's tasks: the ones that get standbys.
fn stateful_tasks(partitions: i32) -> BTreeSet<String> {
    (0..partitions).map(|p| format!("1_{p}")).collect()
}

/// (process id, active, standby) of each peer's latest status.
fn holders(peers: &[&StreamsPeer]) -> Vec<(String, BTreeSet<String>, BTreeSet<String>)> {
    peers
        .iter()
        .filter_map(|p| p.status())
        .map(|s| (s.process_id.unwrap_or_default(), s.active, s.standby))
        .collect()
}

/// Waits until every peer is RUNNING, the tasks split correctly, and every stateful task has
/// exactly `standbys` standby copies.
async fn wait_converged(peers: &[&StreamsPeer], standbys: usize) -> Result<(), String> {
    let expected = expected_tasks(PARTITIONS);
    let deadline = Instant::now() + T;
    let mut last = String::new();
    while Instant::now() < deadline {
        let statuses: Vec<Option<PeerStatus>> = peers.iter().map(|p| p.status()).collect();
        let running = statuses
            .iter()
            .all(|s| s.as_ref().is_some_and(|s| s.state == "RUNNING"));
        let split = check_split(&expected, &holders(peers));
        let mut standby_count = std::collections::BTreeMap::<String, usize>::new();
        for s in statuses.iter().flatten() {
            for t in &s.standby {
                *standby_count.entry(t.clone()).or_default() += 1;
            }
        }
        let standby_ok = stateful_tasks(PARTITIONS)
            .iter()
            .all(|t| standby_count.get(t).copied().unwrap_or(0) == standbys)
            && standby_count.len()
                == if standbys == 0 {
                    0
                } else {
                    PARTITIONS as usize
                };
        if running && split.is_ok() && standby_ok {
            return Ok(());
        }
        last = format!("running {running}, split {split:?}, standbys {standby_count:?}");
        if peers.iter().any(|p| p.exited()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut report = format!("no convergence: {last}\n");
    for p in peers {
        report += &p.report("at the deadline");
    }
    Err(report)
}

/// Describes `group` until it is Stable with `members` members (JVM per call: about a second).
async fn describe_stable(b: &str, group: &str, members: usize) -> GroupDescription {
    let deadline = Instant::now() + T;
    loop {
        let (b2, g2) = (b.to_owned(), group.to_owned());
        let d = tokio::task::spawn_blocking(move || streams_peer::describe_group(&b2, &g2))
            .await
            .unwrap();
        match d {
            Ok(d) if d.state == "Stable" && d.members.len() == members => return d,
            other if Instant::now() >= deadline => {
                panic!("group {group} not Stable with {members} members: {other:?}")
            }
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// Topics and a group id; the group's standby replicas (1) and `configs` set before it exists.
async fn setup(b: &str, prefix: &str, configs: &[(&str, &str)]) -> (String, String, String) {
    let (t, _) = common::transport(b);
    let input = unique(&format!("{prefix}-in"));
    let output = unique(&format!("{prefix}-out"));
    common::create_topic(&*t, &input, PARTITIONS).await;
    common::create_topic(&*t, &output, PARTITIONS).await;
    let group = unique(prefix);
    // The group config may be set before the group exists.
    let mut all = vec![("streams.num.standby.replicas".to_owned(), "1".to_owned())];
    all.extend(configs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let (b2, g2) = (b.to_owned(), group.clone());
    tokio::task::spawn_blocking(move || {
        let pairs: Vec<(&str, &str)> = all.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        streams_peer::set_group_config(&b2, &g2, &pairs)
    })
    .await
    .unwrap()
    .expect("group configs of a group that does not exist yet");
    (group, input, output)
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_java_streams_processes_split_tasks_with_standbys() {
    let Some(b) = broker() else { return };
    let (group, input, output) = setup(&b, "streams-two", &[]).await;
    let p1 = StreamsPeer::builder(&b, &group, &input, &output).spawn();
    let p2 = StreamsPeer::builder(&b, &group, &input, &output).spawn();
    wait_converged(&[&p1, &p2], 1).await.unwrap();

    let s1 = p1.status().unwrap();
    let s2 = p2.status().unwrap();
    let (id1, id2) = (
        s1.process_id.clone().unwrap(),
        s2.process_id.clone().unwrap(),
    );
    assert_ne!(id1, id2, "two JVMs, two process ids");
    // Both processes do work: the sticky assignor balances 8 active tasks over 2 processes.
    assert_eq!(
        s1.active.len(),
        PARTITIONS as usize,
        "{}",
        p1.report("unbalanced")
    );
    assert_eq!(
        s2.active.len(),
        PARTITIONS as usize,
        "{}",
        p2.report("unbalanced")
    );

    // The first heartbeat joins with epoch 0, the topology and the process id; later ones
    // carry neither (nor the rebalance timeout, client tags or task offsets).
    let hb = p1.heartbeats();
    let first = hb.first().map(String::as_str).unwrap_or_default();
    let join = format!(
        "memberEpoch=0, endpointInformationEpoch=-1, instanceId=null, rackId=null, \
         rebalanceTimeoutMs=300000, topology={}, activeTasks=[], standbyTasks=[], \
         warmupTasks=[], processId='{id1}', userEndpoint=null, clientTags=[], taskOffsets=[], \
         taskEndOffsets=[], shutdownApplication=false)",
        streams_peer::java_join_topology(&group, &input)
    );
    assert!(
        first.starts_with("StreamsGroupHeartbeatRequestData(") && first.ends_with(&join),
        "the Java join changed:\n{first}\nexpected it to end with\n{join}"
    );
    assert!(
        hb.iter()
            .skip(1)
            .all(|h| h.contains("rebalanceTimeoutMs=-1, topology=null,")
                && h.contains("processId=null, userEndpoint=null, clientTags=null,")),
        "{hb:#?}"
    );
    eprintln!("first StreamsGroupHeartbeat of {}: {}", id1, hb[0]);

    // StreamsGroupDescribe: both members with their process ids, the same split, the
    // topology with the internal topics the broker created.
    let d = describe_stable(&b, &group, 2).await;
    let described: BTreeSet<&str> = d.members.iter().map(|m| m.process_id.as_str()).collect();
    assert_eq!(
        described,
        BTreeSet::from([id1.as_str(), id2.as_str()]),
        "{d:#?}"
    );
    for m in &d.members {
        assert_eq!(m.member_epoch, d.target_assignment_epoch, "{d:#?}");
        assert!(m.instance_id.is_none(), "{d:#?}");
        assert_eq!(m.active, m.target_active, "{d:#?}");
        assert!(m.warmup.is_empty(), "{d:#?}");
        let peer = if m.process_id == id1 { &s1 } else { &s2 };
        assert_eq!(
            m.active, peer.active,
            "describe vs the peer's own view: {d:#?}"
        );
        assert_eq!(
            m.standby, peer.standby,
            "describe vs the peer's own view: {d:#?}"
        );
    }
    let split: Vec<_> = d
        .members
        .iter()
        .map(|m| (m.process_id.clone(), m.active.clone(), m.standby.clone()))
        .collect();
    check_split(&expected_tasks(PARTITIONS), &split).unwrap();
    assert_eq!(d.topology_epoch, 0);
    let ids: Vec<&str> = d
        .subtopologies
        .iter()
        .filter_map(|s| s.get("subtopology_id")?.as_str())
        .collect();
    assert_eq!(ids, ["0", "1"], "{:#?}", d.subtopologies);
    let sub1 = &d.subtopologies[1];
    let changelog = &sub1["state_changelog_topics"][0];
    assert_eq!(changelog["name"], streams_peer::changelog_topic(&group));
    assert_eq!(changelog["partitions"], PARTITIONS, "{sub1:#}");
    assert_eq!(
        changelog["configs"]["cleanup.policy"], "compact",
        "{sub1:#}"
    );
    let repartition = &sub1["repartition_source_topics"][0];
    assert_eq!(repartition["name"], streams_peer::repartition_topic(&group));
    assert_eq!(repartition["partitions"], PARTITIONS, "{sub1:#}");
    assert_eq!(
        d.subtopologies[0]["repartition_sink_topics"][0],
        streams_peer::repartition_topic(&group)
    );

    assert!(p1.errors().is_empty(), "{}", p1.report("errors"));
    assert!(p2.errors().is_empty(), "{}", p2.report("errors"));
    assert!(p1.close().await, "p1 did not close cleanly");
    assert!(p2.close().await, "p2 did not close cleanly");
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_java_streams_member_restart_gets_its_tasks_back() {
    let Some(b) = broker() else { return };
    // A JVM restart takes 5-7 s on two busy cores: more than the test broker's 6 s session
    // timeout, after which the broker drops the static member and the restart is a new member.
    // The group's own session timeout (a group config, within group.streams.max.session.
    // timeout.ms = 60 s) gives it time.
    let (group, input, output) = setup(
        &b,
        "streams-static",
        &[("streams.session.timeout.ms", "30000")],
    )
    .await;
    let a = StreamsPeer::builder(&b, &group, &input, &output)
        .instance_id("a")
        .spawn();
    let other = StreamsPeer::builder(&b, &group, &input, &output)
        .instance_id("b")
        .spawn();
    wait_converged(&[&a, &other], 1).await.unwrap();
    let before = describe_stable(&b, &group, 2).await;
    let a_status = a.status().unwrap();
    let other_status = other.status().unwrap();
    let a_member = before
        .members
        .iter()
        .find(|m| m.instance_id.as_deref() == Some("a-1"))
        .unwrap_or_else(|| panic!("no member with instance id a-1 (a + thread index): {before:#?}"))
        .clone();
    let seen_before = other.statuses().len();

    // A static member's close leaves with epoch -2: the broker keeps its assignment until
    // the session timeout (the group's streams.session.timeout.ms, 30 s here).
    assert!(a.close().await, "a did not close cleanly");
    let a2 = StreamsPeer::builder(&b, &group, &input, &output)
        .instance_id("a")
        .spawn();
    let back = a2
        .wait_for(T, |s| s.state == "RUNNING" && s.active == a_status.active)
        .await;
    assert!(
        back.is_some(),
        "{}",
        a2.report(&format!("did not get {:?} back", a_status.active))
    );
    wait_converged(&[&a2, &other], 1).await.unwrap();

    // The other member never lost an active task while a was away.
    for s in &other.statuses()[seen_before..] {
        assert!(
            other_status.active.is_subset(&s.active) || s.state != "RUNNING",
            "{}",
            other.report("lost an active task during a's restart")
        );
    }
    let after = describe_stable(&b, &group, 2).await;
    let a2_member = after
        .members
        .iter()
        .find(|m| m.instance_id.as_deref() == Some("a-1"))
        .unwrap_or_else(|| panic!("{after:#?}"));
    assert_ne!(
        a2_member.member_id, a_member.member_id,
        "a new JVM draws a new member id"
    );
    assert_eq!(a2_member.active, a_member.active, "{before:#?}\n{after:#?}");
    // A restart with a fresh state directory draws a new process id; the broker takes it.
    assert_eq!(Some(a2_member.process_id.clone()), a2.process_id());
    assert!(a2.close().await);
    assert!(other.close().await);
}

/// Several members of one process (Kafka Streams stream threads share the process id): the
/// broker places standbys by process, so no process holds a task both active (on one of its
/// members) and standby (on another), and no task twice in one process.
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_threads_in_one_process_share_its_process_id() {
    let Some(b) = broker() else { return };
    let (group, input, output) = setup(&b, "streams-threads", &[]).await;
    let p1 = StreamsPeer::builder(&b, &group, &input, &output)
        .threads(2)
        .spawn();
    let p2 = StreamsPeer::builder(&b, &group, &input, &output).spawn();
    wait_converged(&[&p1, &p2], 1).await.unwrap();
    let id1 = p1.process_id().unwrap();
    let id2 = p2.process_id().unwrap();

    let d = describe_stable(&b, &group, 3).await;
    let of = |id: &str| d.members.iter().filter(|m| m.process_id == id).count();
    assert_eq!((of(&id1), of(&id2)), (2, 1), "{d:#?}");
    let per_member: Vec<_> = d
        .members
        .iter()
        .map(|m| (m.process_id.clone(), m.active.clone(), m.standby.clone()))
        .collect();
    check_split(&expected_tasks(PARTITIONS), &per_member).unwrap_or_else(|e| panic!("{e}\n{d:#?}"));
    // Every member of the two-thread process has work of its own.
    for m in d.members.iter().filter(|m| m.process_id == id1) {
        assert!(!m.active.is_empty() || !m.standby.is_empty(), "{d:#?}");
    }
    assert!(p1.close().await);
    assert!(p2.close().await);
}
