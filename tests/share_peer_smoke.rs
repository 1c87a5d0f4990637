//! The Java share-consumer peer (tests/kafka/SharePeer.java through tests/common/share_peer.rs)
//! against the real Kafka 4.4 broker (tests/kafka/with-broker.sh), so that tests pairing it
//! with our share member can rely on it:
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

/// The broker's address, or None (the test passes vacuously, saying so) under a Kafka release
/// before 4.4: the peer runs the broker's kafka-clients, and share groups are checked on 4.4.
fn broker() -> Option<String> {
    let bootstrap = common::bootstrap()?;
    let version = std::env::var("KAFKA_VERSION").unwrap_or_default();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    if let (Some(Some(major)), Some(Some(minor))) = (parts.next(), parts.next())
        && (major, minor) < (4, 4)
    {
        eprintln!("skipped: the share peer is checked on Kafka 4.4, not {version}");
        return None;
    }
    Some(bootstrap)
}

/// Creates `topic` with `partitions` partitions, produces `per_partition` records
/// `v-{p}-{i}` (in batches of 1,000) to each, and sets `share.auto.offset.reset=earliest` on
/// `group` (a share group starts at the latest offset otherwise). Returns the values.
async fn prepare(
    bootstrap: &str,
    topic: &str,
    group: &str,
    partitions: i32,
    per_partition: usize,
) -> BTreeSet<String> {
    let (t, config) = common::transport(bootstrap);
    common::create_topic(&*t, topic, partitions).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut values = BTreeSet::new();
    for p in 0..partitions {
        let tp = TopicPartition::new(topic, p);
        let all: Vec<String> = (0..per_partition).map(|i| format!("v-{p}-{i}")).collect();
        for chunk in all.chunks(1000) {
            let records: Vec<(Option<Bytes>, Option<Bytes>)> = (chunk.iter())
                .map(|v| (None, Some(Bytes::from(v.clone()))))
                .collect();
            fetch::produce_settling(&*t, &tp, &records, config.request_timeout, deadline)
                .await
                .unwrap_or_else(|e| panic!("produce to {tp}: {e}"));
        }
        values.extend(all);
    }
    common::set_group_configs(bootstrap, group, &[("share.auto.offset.reset", "earliest")]).await;
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
