//! examples/rskafka_consumer.rs against the real broker, in each protocol: rskafka produces keyed
//! records to a 4-partition topic; member A (dynamic) processes the first 2,000; member B
//! (static) joins, so A stops its fetch tasks, commits and hands its revocation back, and B
//! starts from A's commits; A closes and B takes its partitions over from A's close commit.
//! Every record is processed exactly once (a missing commit before a hand-over would replay
//! records, `auto.offset.reset=earliest`), by both members, and after both closed the committed
//! offsets are the log end offsets.

mod common;
#[allow(dead_code)]
#[path = "../examples/rskafka_consumer.rs"]
mod rskafka_consumer;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use consumer_membership::{CloseOutcome, GroupConfig, GroupMember, TcpTransport, TopicPartition};
use rskafka::client::ClientBuilder;
use rskafka::client::partition::{Compression, PartitionClient, UnknownTopicHandling};
use rskafka::record::Record;
use rskafka_consumer::{Args, Processed, Report};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const PARTITIONS: i32 = 4;

type Seen = Arc<Mutex<Vec<Processed>>>;

/// Produces `n` keyed records round robin over the partitions, numbered from `*produced`.
async fn produce(clients: &[PartitionClient], produced: &mut usize, n: usize) {
    let mut batches: Vec<Vec<Record>> = vec![Vec::new(); clients.len()];
    for i in *produced..*produced + n {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        batches[i % clients.len()].push(Record {
            key: Some(format!("key-{i}").into_bytes()),
            value: Some(format!("value-{i}").into_bytes()),
            headers: BTreeMap::new(),
            timestamp: chrono::DateTime::from_timestamp_millis(ms as i64).unwrap(),
        });
    }
    for (pc, batch) in clients.iter().zip(batches) {
        for chunk in batch.chunks(100) {
            pc.produce(chunk.to_vec(), Compression::NoCompression)
                .await
                .expect("produce");
        }
    }
    *produced += n;
}

/// Starts a consumer from a properties file of its own; it runs until the sender fires.
fn start(
    name: &str,
    topic: &str,
    lines: &[String],
    seen: &Seen,
) -> (oneshot::Sender<()>, JoinHandle<Report>) {
    let path = std::env::temp_dir().join(format!("{}.properties", common::unique(name)));
    std::fs::write(&path, lines.join("\n")).unwrap();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let (seen, topic) = (seen.clone(), topic.to_owned());
    // The static member's membership runs on a thread of its own (`start_on`).
    let membership_thread = lines.iter().any(|l| l.starts_with("group.instance.id"));
    let task = tokio::spawn(async move {
        let args = Args {
            properties: path.clone(),
            topic,
            quiet: true,
            commit_interval_ms: 60_000, // only the revocation and close commits count
            max_records: None,
            membership_thread,
        };
        let stop = async { drop(stop_rx.await) };
        let record = move |r: &Processed| seen.lock().unwrap().push(r.clone());
        let report = rskafka_consumer::run(&args, stop, record).await;
        std::fs::remove_file(&path).ok();
        report.expect("consumer run")
    });
    (stop_tx, task)
}

/// How many different records were processed.
fn distinct(seen: &[Processed]) -> usize {
    let at = |r: &Processed| (r.partition.partition, r.offset);
    seen.iter().map(at).collect::<BTreeSet<_>>().len()
}

/// Waits up to 90 s until `f` holds of the records processed so far.
async fn until(seen: &Seen, what: &str, f: impl Fn(&[Processed]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while !f(&seen.lock().unwrap()) {
        assert!(Instant::now() < deadline, "no {what} within 90 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn pairing(protocol: &str) {
    let Some(b) = common::bootstrap() else { return };
    let (t, client) = common::transport(&b);
    let topic = common::unique("rskafka");
    let group = common::unique("rskafka-group");
    common::create_topic(&*t, &topic, PARTITIONS).await;
    let rs = ClientBuilder::new(vec![b.clone()]).build().await.unwrap();
    let mut clients = Vec::new();
    for p in 0..PARTITIONS {
        let pc = rs.partition_client(topic.clone(), p, UnknownTopicHandling::Retry);
        clients.push(pc.await.unwrap());
    }
    let mut produced = 0;
    produce(&clients, &mut produced, 2000).await;

    let file = |instance: Option<&str>| {
        let mut lines = vec![
            format!("bootstrap.servers={b}"),
            format!("group.id={group}"),
            format!("group.protocol={protocol}"),
            "auto.offset.reset=earliest".to_owned(),
        ];
        lines.extend(instance.map(|i| format!("group.instance.id={i}")));
        lines
    };
    let seen = Seen::default();
    let (stop_a, a) = start("a", &topic, &file(None), &seen);
    until(&seen, "first 2000 records", |s| distinct(s) >= 2000).await;
    let member_a = seen.lock().unwrap()[0].member.clone();

    let (stop_b, b_task) = start("b", &topic, &file(Some("b-1")), &seen);
    // B is in once it processes records: keep producing until it does.
    let deadline = Instant::now() + Duration::from_secs(90);
    while !seen.lock().unwrap().iter().any(|r| r.member != member_a) {
        assert!(Instant::now() < deadline, "member B processed nothing");
        produce(&clients, &mut produced, 40).await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let n = produced;
    until(&seen, "records of both members", |s| distinct(s) >= n).await;
    stop_a.send(()).unwrap();
    let report_a = a.await.unwrap();
    // B takes A's partitions over from A's close commit.
    produce(&clients, &mut produced, 40).await;
    let n = produced;
    until(&seen, "records after A closed", |s| distinct(s) >= n).await;
    stop_b.send(()).unwrap();
    let report_b = b_task.await.unwrap();

    let seen = seen.lock().unwrap().clone();
    let keys: BTreeSet<&[u8]> = seen.iter().filter_map(|r| r.key.as_deref()).collect();
    assert_eq!(distinct(&seen), produced, "every record processed");
    assert_eq!(seen.len(), produced, "no record processed twice");
    assert_eq!(keys.len(), produced, "every key");
    assert_eq!(report_a.processed + report_b.processed, produced as u64);
    assert!(matches!(report_a.close, CloseOutcome::Left { error: None }));
    eprintln!(
        "{protocol}: {produced} records, A processed {}, B {}; close A {:?}, B {:?}",
        report_a.processed, report_b.processed, report_a.close, report_b.close
    );

    // The committed offsets, read by a member of the group that never subscribes.
    let reader = GroupMember::start(
        Arc::new(TcpTransport::new(client)),
        GroupConfig::new(&group),
    )
    .unwrap();
    let partitions: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(topic.clone(), p))
        .collect();
    let committed = reader.committed(partitions).await.expect("committed");
    for (p, pc) in clients.iter().enumerate() {
        let end = pc
            .get_offset(rskafka::client::partition::OffsetAt::Latest)
            .await
            .unwrap();
        let tp = TopicPartition::new(topic.clone(), p as i32);
        assert_eq!(committed[&tp].offset, Some(end), "{tp}");
    }
    reader
        .close(consumer_membership::CloseOptions::Default)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
async fn classic_pairing() {
    pairing("classic").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
async fn consumer_pairing() {
    pairing("consumer").await;
}
