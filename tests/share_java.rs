//! The Java share-consumer peer (tests/kafka/SharePeer.java through tests/common/share_peer.rs,
//! kafka-clients 4.4.0 whatever the broker) against a real Kafka broker of 4.2 or later
//! (tests/kafka/with-broker.sh; share groups are GA since 4.2, an older broker passes every
//! test vacuously), so that tests pairing it with our share member can rely on it:
//!
//! - with ACCEPT, a Java `KafkaShareConsumer` alone in a share group receives 1,000 produced
//!   records (2 partitions) exactly once each, at delivery count 1, every commitSync reports
//!   no failed acknowledgement, and closing stdin closes it cleanly;
//! - with `release-first`, every record is delivered first with delivery count 1 (RELEASEd),
//!   then again with 2 (ACCEPTed), and never a third time;
//! - `--max-records 150` stops after 150 records and releases the rest of its fetch: a second
//!   peer of the group then receives exactly the other 150;
//! - `--bench` (implicit acknowledgement) reports the wall and CPU time of 20,000 records.

mod common;
#[path = "../examples/common/fetch.rs"]
mod fetch;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::share_peer::{Ack, AckMode, SharePeer};
use common::unique;
use consumer_membership::machine::TopicPartition;

const T: Duration = Duration::from_secs(90);

/// Share groups are GA from Kafka 4.2 on; the Java peer is kafka-clients 4.4.0 under every
/// broker (`share_peer::SHARE_PEER_VERSION`).
fn broker() -> Option<String> {
    common::bootstrap_since((4, 2), "share groups (GA)")
}

/// Creates `topic` with `partitions` partitions, sets `share.auto.offset.reset=earliest` on
/// `group` (a share group starts at the latest offset otherwise), and produces
/// `per_partition` records to each partition ([`produce_values`]). Returns the values.
async fn prepare(
    bootstrap: &str,
    topic: &str,
    group: &str,
    partitions: i32,
    per_partition: usize,
) -> BTreeSet<String> {
    create(bootstrap, topic, group, partitions).await;
    produce_values(bootstrap, topic, partitions, per_partition).await
}

/// Creates `topic` and sets `share.auto.offset.reset=earliest` on `group`.
async fn create(bootstrap: &str, topic: &str, group: &str, partitions: i32) {
    let (t, _) = common::transport(bootstrap);
    common::create_topic(&*t, topic, partitions).await;
    common::set_group_configs(bootstrap, group, &[("share.auto.offset.reset", "earliest")]).await;
}

/// Produces `per_partition` records `v-{p}-{i}` to each partition of `topic`, in batches of
/// 1,000 taking the partitions in turn (every partition fills at the same pace). Returns the
/// values.
async fn produce_values(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    per_partition: usize,
) -> BTreeSet<String> {
    let (t, config) = common::transport(bootstrap);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut values = BTreeSet::new();
    for first in (0..per_partition).step_by(1000) {
        for p in 0..partitions {
            let tp = TopicPartition::new(topic, p);
            let chunk: Vec<String> = (first..per_partition.min(first + 1000))
                .map(|i| format!("v-{p}-{i}"))
                .collect();
            let records: Vec<(Option<Bytes>, Option<Bytes>)> = (chunk.iter())
                .map(|v| (None, Some(Bytes::from(v.clone()))))
                .collect();
            fetch::produce_settling(&*t, &tp, &records, config.request_timeout, deadline)
                .await
                .unwrap_or_else(|e| panic!("produce to {tp}: {e}"));
            values.extend(chunk);
        }
    }
    values
}

#[tokio::test]
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: tests/kafka/with-broker.sh"
)]
async fn java_share_consumer_accepts_every_record_once() {
    let Some(bootstrap) = broker() else { return };
    let topic = unique("share-peer-accept");
    let group = unique("share-peer-accept-group");
    let expected = prepare(&bootstrap, &topic, &group, 2, 500).await;

    let started = Instant::now();
    let peer = SharePeer::builder(&bootstrap, &topic, &group).spawn();
    peer.wait_started(T).await;
    let all = peer
        .wait_for(T, |p| p.records.len() >= expected.len())
        .await;
    assert!(all, "{}", peer.report("not every record within 90 s"));
    let took = started.elapsed();
    // A redelivery would come within the acquisition lock (30 s) only if an acknowledgement
    // got lost; a second of quiet is enough to catch a duplicate delivery from the fetch.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let progress = peer.progress();
    let report = peer.report("after 1,000 records");
    assert!(peer.close_async().await, "not closed cleanly: {report}");

    let values: Vec<&str> = progress.records.iter().map(|r| r.value.as_str()).collect();
    let distinct: BTreeSet<String> = values.iter().map(|v| v.to_string()).collect();
    assert_eq!(values.len(), expected.len(), "duplicates: {report}");
    assert_eq!(distinct, expected, "{report}");
    assert!(
        (progress.records.iter()).all(|r| r.delivery_count == 1 && r.ack == Ack::Accept),
        "{report}"
    );
    let sent: usize = progress.commits.iter().map(|c| c.count).sum();
    let failed: usize = progress.commits.iter().map(|c| c.failed).sum();
    assert_eq!((sent, failed), (expected.len(), 0), "{report}");
    assert!(progress.errors.is_empty(), "{report}");
    eprintln!(
        "accept: {} records in {:.2} s from spawn, {} commits, stats {:?}",
        values.len(),
        took.as_secs_f64(),
        progress.commits.len(),
        progress.stats
    );
}

#[tokio::test]
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: tests/kafka/with-broker.sh"
)]
async fn java_share_consumer_release_first_sees_every_record_twice() {
    let Some(bootstrap) = broker() else { return };
    let topic = unique("share-peer-release");
    let group = unique("share-peer-release-group");
    let expected = prepare(&bootstrap, &topic, &group, 1, 200).await;

    let peer = SharePeer::builder(&bootstrap, &topic, &group)
        .ack(AckMode::ReleaseFirst)
        .spawn();
    let all = peer
        .wait_for(T, |p| {
            p.records.iter().filter(|r| r.ack == Ack::Accept).count() >= expected.len()
        })
        .await;
    assert!(
        all,
        "{}",
        peer.report("not every record accepted within 90 s")
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let accepted: BTreeSet<String> = peer.values_accepted().into_iter().collect();
    let records = peer.records();
    let report = peer.report("after release-first");
    assert!(peer.close_async().await, "not closed cleanly: {report}");

    assert_eq!(accepted, expected, "{report}");
    let mut deliveries: BTreeMap<&str, Vec<(i16, Ack)>> = BTreeMap::new();
    for r in &records {
        deliveries
            .entry(&r.value)
            .or_default()
            .push((r.delivery_count, r.ack));
    }
    for (value, seen) in &deliveries {
        assert_eq!(
            seen,
            &[(1, Ack::Release), (2, Ack::Accept)],
            "{value}: {report}"
        );
    }
    assert_eq!(records.len(), 2 * expected.len(), "{report}");
    eprintln!(
        "release-first: {} deliveries of {} records",
        records.len(),
        expected.len()
    );
}

#[tokio::test]
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: tests/kafka/with-broker.sh"
)]
async fn java_share_consumer_bench_reports_its_time() {
    let Some(bootstrap) = broker() else { return };
    const N: usize = 20_000;
    let topic = unique("share-peer-bench");
    let group = unique("share-peer-bench-group");
    prepare(&bootstrap, &topic, &group, 1, N).await;

    let peer = SharePeer::builder(&bootstrap, &topic, &group)
        .bench(N as u64)
        .spawn();
    let done = peer.wait_for(T, |p| p.closed).await;
    assert!(done, "{}", peer.report("no bench result within 90 s"));
    let bench = peer.bench_result().expect("a bench line before closed");
    let stats = peer.stats().expect("a stats line at exit");
    assert!(peer.records().is_empty(), "bench prints no records");
    assert!(bench.records >= N as u64, "{bench:?}");
    assert!(stats.records >= N as u64, "{stats:?}");
    assert!(bench.elapsed > Duration::ZERO && bench.cpu > Duration::ZERO);
    eprintln!(
        "bench: {} records in {:.3} s ({:.0}/s), {:.3} s CPU; whole run {:.3} s, {:.3} s CPU",
        bench.records,
        bench.elapsed.as_secs_f64(),
        bench.rate(),
        bench.cpu.as_secs_f64(),
        stats.elapsed.as_secs_f64(),
        stats.cpu.as_secs_f64()
    );
    peer.close_async().await;
}

#[tokio::test]
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: tests/kafka/with-broker.sh"
)]
async fn java_share_consumer_max_records_releases_the_rest() {
    let Some(bootstrap) = broker() else { return };
    let topic = unique("share-peer-max");
    let group = unique("share-peer-max-group");
    let expected = prepare(&bootstrap, &topic, &group, 1, 300).await;

    // Stops by itself after 150 (the fetch brings more: those go back RELEASEd).
    let first = SharePeer::builder(&bootstrap, &topic, &group)
        .max_records(150)
        .spawn();
    let closed = first.wait_for(T, |p| p.closed).await;
    assert!(closed, "{}", first.report("not closed after 150 records"));
    let first_values = first.values_accepted();
    let report = first.report("after --max-records 150");
    assert!(first.close_async().await);
    assert_eq!(first_values.len(), 150, "{report}");

    let second = SharePeer::builder(&bootstrap, &topic, &group).spawn();
    let rest = second.wait_for(T, |p| p.records.len() >= 150).await;
    assert!(rest, "{}", second.report("not the other 150 within 90 s"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let second_values = second.values_accepted();
    let report = second.report("after the rest");
    assert!(second.close_async().await, "{report}");
    let all: BTreeSet<String> = first_values.iter().chain(&second_values).cloned().collect();
    assert_eq!(second_values.len(), 150, "{report}");
    assert_eq!(all, expected, "{report}");
}

// ------------------------------------------------------------------ ours beside Java

/// One process of ours: `examples/share_consumer.rs --json`, its stdout lines read as they come.
struct Ours {
    label: String,
    child: Option<std::process::Child>,
    lines: common::JsonLines,
}

impl Ours {
    fn spawn(label: &str, bootstrap: &str, topic: &str, group: &str, extra: &[&str]) -> Self {
        let binary = common::build_example("share_consumer");
        let mut child = std::process::Command::new(binary)
            .args([
                "--bootstrap",
                bootstrap,
                "--group",
                group,
                "--topic",
                topic,
                "--json",
            ])
            .args(extra)
            // OURS_LOG: the tracing filter of our processes (their RUST_LOG), for a rerun.
            .env("RUST_LOG", std::env::var("OURS_LOG").unwrap_or_default())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("spawn share_consumer");
        let stdout = child.stdout.take().expect("stdout");
        let lines = common::json_lines(stdout);
        Self {
            label: label.to_owned(),
            child: Some(child),
            lines,
        }
    }

    fn of(&self, event: &str) -> Vec<serde_json::Value> {
        common::json_events(&self.lines, event)
    }

    /// (partition, offset, value, delivery count, ack kind) of every record processed.
    fn records(&self) -> Vec<(i64, i64, String, i64, String)> {
        (self.of("record").iter())
            .map(|v| {
                let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
                let n = |k: &str| v[k].as_i64().unwrap_or(-1);
                (
                    n("partition"),
                    n("offset"),
                    s("value"),
                    n("delivery_count"),
                    s("ack"),
                )
            })
            .collect()
    }

    /// The values whose ACCEPT the broker confirmed, and the acknowledgements that failed.
    fn accepted(&self) -> (Vec<String>, usize) {
        let value_at: BTreeMap<(i64, i64), String> = (self.records().into_iter())
            .map(|(p, o, v, _, _)| ((p, o), v))
            .collect();
        let (mut values, mut failed) = (Vec::new(), 0);
        for a in self.of("acked") {
            if a["ok"] != true {
                failed += 1;
                continue;
            }
            if a["kind"] != "Accept" {
                continue;
            }
            let p = a["partition"].as_i64().unwrap_or(-1);
            let (first, last) = (a["first"].as_i64().unwrap(), a["last"].as_i64().unwrap());
            values.extend((first..=last).filter_map(|o| value_at.get(&(p, o)).cloned()));
        }
        (values, failed)
    }

    /// kill -9.
    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGINT (the example's Ctrl-C: it sends its acknowledgements and leaves), then waits for
    /// its exit (SIGKILL after 40 s); true if it exited by itself with success.
    async fn stop(&mut self) -> bool {
        let Some(mut c) = self.child.take() else {
            return false;
        };
        let _ = std::process::Command::new("kill")
            .args(["-INT", &c.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(40);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = c.try_wait() {
                // Let the reader thread take the last lines.
                tokio::time::sleep(Duration::from_millis(200)).await;
                return status.success();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = c.kill();
        let _ = c.wait();
        false
    }
}

impl Drop for Ours {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The acceptance run of share groups: 100,000 records on 4 partitions consumed by two Java
/// `KafkaShareConsumer`s and two processes of ours in one share group (explicit ACCEPT, the
/// default share settings: 30 s acquisition lock, delivery limit 5); one of ours is killed
/// with SIGKILL mid-stream and a new process of ours (a new member id) starts. Every record
/// must be accepted exactly once: a value whose ACCEPT the broker confirmed to two consumers is
/// a duplicate; a value nobody's ACCEPT was confirmed for is lost, unless the killed process
/// had processed it and may have had its acknowledgement applied before it died.
#[tokio::test]
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: tests/kafka/with-broker.sh"
)]
async fn ours_and_java_accept_100000_records_exactly_once_across_a_kill_9() {
    let Some(bootstrap) = broker() else { return };
    let topic = unique("share-mixed");
    let group = unique("share-mixed-group");
    create(&bootstrap, &topic, &group, 4).await;

    let java: Vec<SharePeer> = (0..2)
        .map(|_| SharePeer::builder(&bootstrap, &topic, &group).spawn())
        .collect();
    let mut ours = vec![
        Ours::spawn("ours-0", &bootstrap, &topic, &group, &[]),
        Ours::spawn("ours-1", &bootstrap, &topic, &group, &[]),
    ];
    // Every member in the group with a partition before the records come: a member that
    // joins later finds them taken (Java's consumer reads 100,000 in about a second).
    let until = Instant::now() + Duration::from_secs(120);
    let mut members = Vec::new();
    while Instant::now() < until {
        members = common::share_group_members(&bootstrap, &group).await;
        if members.len() == 4 && members.iter().all(|(_, p)| !p.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        Instant::now() < until,
        "4 members assigned within 120 s: {members:?}"
    );
    // Records come while the members consume: the kill falls mid-stream.
    let producing = tokio::spawn({
        let (bootstrap, topic) = (bootstrap.clone(), topic.clone());
        async move { produce_values(&bootstrap, &topic, 4, 25_000).await }
    });
    let total = 100_000;
    let processed = |ours: &[Ours], java: &[SharePeer]| {
        ours.iter().map(|o| o.of("record").len()).sum::<usize>()
            + java.iter().map(|j| j.records().len()).sum::<usize>()
    };
    // Mid-stream: once a fifth of the records went through and ours-0 has some in hand.
    let until = Instant::now() + Duration::from_secs(180);
    while (processed(&ours, &java) < total / 5 || ours[0].of("record").len() < 500)
        && Instant::now() < until
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let counts = |ours: &[Ours], java: &[SharePeer]| {
        let mut c: Vec<(String, usize)> = (ours.iter())
            .map(|o| (o.label.clone(), o.of("record").len()))
            .collect();
        c.extend((java.iter().enumerate()).map(|(i, j)| (format!("java-{i}"), j.records().len())));
        c
    };
    assert!(
        Instant::now() < until,
        "a fifth of the records and 500 of ours-0 within 180 s: {:?}",
        counts(&ours, &java)
    );
    eprintln!("kill -9 of ours-0 at {:?}", counts(&ours, &java));
    ours[0].kill9();
    let killed_at = processed(&ours, &java);
    ours.push(Ours::spawn("ours-2", &bootstrap, &topic, &group, &[]));
    let expected = producing.await.expect("the producer");
    assert_eq!(expected.len(), total);

    // Until every value is confirmed accepted, or nothing moved for 90 s: what the killed
    // process held comes back after its acquisition lock (30 s), but its partitions may be
    // assigned to it alone until the coordinator expires it (the 45 s share session), assigns
    // them again (within the next heartbeat interval, 5 s) and a member fetches them.
    let confirmed = |ours: &[Ours], java: &[SharePeer]| {
        let mut all: Vec<String> = ours.iter().flat_map(|o| o.accepted().0).collect();
        all.extend(java.iter().flat_map(|j| j.values_accepted()));
        all
    };
    let until = Instant::now() + Duration::from_secs(300);
    let (mut last, mut moved_at) = (0, Instant::now());
    loop {
        let done: BTreeSet<String> = confirmed(&ours, &java).into_iter().collect();
        if done.len() == total || Instant::now() > until {
            break;
        }
        let now = processed(&ours, &java);
        if now != last {
            (last, moved_at) = (now, Instant::now());
        } else if moved_at.elapsed() > Duration::from_secs(90) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut closed = Vec::new();
    for o in ours.iter_mut().skip(1) {
        closed.push((o.label.clone(), o.stop().await));
    }
    let java_commits: Vec<_> = java.iter().flat_map(|j| j.commits()).collect();
    let mut java_closed = Vec::new();
    let mut java_values = Vec::new();
    let mut java_deliveries = Vec::new();
    for j in java {
        java_deliveries.extend(j.records().iter().map(|r| i64::from(r.delivery_count)));
        java_values.push(j.values_accepted());
        java_closed.push(j.close_async().await);
    }

    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    let mut per_member = Vec::new();
    for o in &ours[1..] {
        let (values, failed) = o.accepted();
        assert_eq!(failed, 0, "{}: acknowledgements failed", o.label);
        per_member.push((o.label.clone(), values.len()));
        for v in values {
            *count.entry(v).or_default() += 1;
        }
    }
    let (killed_confirmed, _) = ours[0].accepted();
    per_member.push(("ours-0 (killed)".into(), killed_confirmed.len()));
    for v in &killed_confirmed {
        *count.entry(v.clone()).or_default() += 1;
    }
    for (i, values) in java_values.iter().enumerate() {
        per_member.push((format!("java-{i}"), values.len()));
        for v in values {
            *count.entry(v.clone()).or_default() += 1;
        }
    }
    let failed_java: usize = java_commits.iter().map(|c| c.failed).sum();
    assert_eq!(
        failed_java, 0,
        "Java acknowledgements failed: {java_commits:?}"
    );
    let twice: Vec<_> = count.iter().filter(|(_, n)| **n > 1).collect();
    let in_doubt: BTreeSet<String> = (ours[0].records().into_iter())
        .map(|r| r.2)
        .filter(|v| !count.contains_key(v))
        .collect();
    let lost: Vec<&String> = (expected.iter())
        .filter(|v| !count.contains_key(*v) && !in_doubt.contains(*v))
        .take(20)
        .collect();
    let redelivered = (ours.iter().flat_map(|o| o.records()))
        .filter(|r| r.3 > 1)
        .count();
    eprintln!(
        "share mixed: {total} records; confirmed accepted per member {per_member:?}; \
         killed after {killed_at} processed; {} of the killed process's records in doubt \
         (processed, ACCEPT unconfirmed, never delivered again: applied before the kill); \
         {redelivered} redeliveries to ours; closes ours {closed:?} java {java_closed:?}",
        in_doubt.len()
    );
    // The broker's own account: nothing of the topic is left unacknowledged in the group (the
    // lag counts the records not in a terminal state), and with ACCEPT only and no record near
    // the delivery limit (5), terminal means accepted.
    let offsets = common::share_peer::share_group_offsets(&bootstrap, &group, &topic).await;
    let max_delivery = (ours.iter().flat_map(|o| o.records()))
        .map(|r| r.3)
        .chain(java_deliveries)
        .max();
    eprintln!("share group offsets {offsets:?}; highest delivery count {max_delivery:?}");
    assert_eq!(offsets.len(), 4, "{offsets:?}");
    assert!(offsets.values().all(|o| o.lag == Some(0)), "{offsets:?}");
    assert!(max_delivery < Some(5), "{max_delivery:?}");
    assert!(
        twice.is_empty(),
        "accepted twice: {:?}",
        &twice[..twice.len().min(20)]
    );
    assert!(lost.is_empty(), "lost (first 20): {lost:?}");
    assert_eq!(count.len() + in_doubt.len(), total);
    // The assignment is by partition: with more members than partitions some get none, but
    // ours (other than the killed one) and Java's both take part.
    let took = |prefix: &str| (per_member.iter()).any(|(l, n)| l.starts_with(prefix) && *n > 0);
    assert!(took("ours") && took("java"), "{per_member:?}");
    assert!(
        closed.iter().all(|(_, ok)| *ok),
        "ours closed cleanly: {closed:?}"
    );
}

/// RELEASE and REJECT as the Java client does them, one group each (the group's default
/// `group.share.delivery.count.limit`, 5): RELEASE brings every record back until its fifth
/// delivery, then never again; REJECT ends every record at its first delivery.
#[tokio::test]
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: tests/kafka/with-broker.sh"
)]
async fn release_and_reject_give_the_delivery_counts_java_gets() {
    let Some(bootstrap) = broker() else { return };
    let topic = unique("share-kinds");
    let (t, _) = common::transport(&bootstrap);
    common::create_topic(&*t, &topic, 1).await;
    let values = {
        let g = unique("share-kinds-seed");
        prepare_values(&bootstrap, &topic, &g, 50).await
    };
    // Delivery counts per value: the highest seen, and how many deliveries in all.
    type Counts = BTreeMap<String, (i64, usize)>;
    let histogram = |records: Vec<(String, i64)>| -> Counts {
        records.into_iter().fold(BTreeMap::new(), |mut m, (v, n)| {
            let e = m.entry(v).or_insert((0, 0));
            e.0 = e.0.max(n);
            e.1 += 1;
            m
        })
    };
    let quiet = Duration::from_secs(4);
    for (kind, java_mode, per_record) in [
        ("release", AckMode::Release, 5usize),
        ("reject", AckMode::Reject, 1),
    ] {
        let want = values.len() * per_record;
        let g_ours = unique(&format!("share-{kind}-ours"));
        let g_java = unique(&format!("share-{kind}-java"));
        for g in [&g_ours, &g_java] {
            common::set_group_configs(&bootstrap, g, &[("share.auto.offset.reset", "earliest")])
                .await;
        }
        let mut ours = Ours::spawn(kind, &bootstrap, &topic, &g_ours, &["--ack", kind]);
        let java = SharePeer::builder(&bootstrap, &topic, &g_java)
            .ack(java_mode)
            .spawn();
        let until = Instant::now() + T;
        while (ours.of("record").len() < want || java.records().len() < want)
            && Instant::now() < until
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Nothing more may come.
        tokio::time::sleep(quiet).await;
        assert!(ours.stop().await, "{kind}: ours closed cleanly");
        let java_records = java.records();
        assert!(java.close_async().await, "{kind}: java closed cleanly");
        let ours_h = histogram(ours.records().into_iter().map(|r| (r.2, r.3)).collect());
        let java_h = histogram(
            java_records
                .into_iter()
                .map(|r| (r.value, r.delivery_count.into()))
                .collect(),
        );
        let want_h: Counts = (values.iter())
            .map(|v| (v.clone(), (per_record as i64, per_record)))
            .collect();
        assert_eq!(java_h, want_h, "{kind}: Java's delivery counts");
        assert_eq!(ours_h, java_h, "{kind}: ours as Java's");
        eprintln!(
            "{kind}: {} records, each delivered {per_record} time(s) to ours and to Java",
            values.len()
        );
    }
}

/// Produces `n` values `k-{i}` to partition 0 of `topic`; returns them.
async fn prepare_values(bootstrap: &str, topic: &str, _group: &str, n: usize) -> Vec<String> {
    let (t, config) = common::transport(bootstrap);
    let values: Vec<String> = (0..n).map(|i| format!("k-{i}")).collect();
    let records: Vec<(Option<Bytes>, Option<Bytes>)> = (values.iter())
        .map(|v| (None, Some(Bytes::from(v.clone()))))
        .collect();
    let tp = TopicPartition::new(topic, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    fetch::produce_settling(&*t, &tp, &records, config.request_timeout, deadline)
        .await
        .unwrap_or_else(|e| panic!("produce to {tp}: {e}"));
    values
}
