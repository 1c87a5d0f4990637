//! Example group consumer: connects, prints the broker's API versions and the group's
//! coordinator, joins the group (classic, consumer or auto protocol; static with
//! `--instance-id`), fetches and prints the records of its partitions, commits after each batch
//! and before handing a revocation ticket back, and on Ctrl-C (or after `--seconds` /
//! `--max-records`) commits and closes with the default leave semantics.
//!
//! ```text
//! tests/kafka/with-broker.sh cargo run --example consumer -- --group demo --topic demo --produce 10 --seconds 10
//! cargo run --example consumer -- --bootstrap 127.0.0.1:9092 --group demo --topic orders --instance-id w1
//! ```
//! Without `--bootstrap` it uses `KAFKA_BOOTSTRAP`, then the broker that tests/kafka/broker.sh
//! started (target/kafka-it/bootstrap). `--produce N` first writes N records to the topic.

#[path = "common/fetch.rs"]
mod fetch;
#[path = "common/shutdown.rs"]
mod shutdown;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use consumer_membership::config::{GroupConfig, GroupProtocol};
use consumer_membership::driver::{GroupMember, MemberHandle};
use consumer_membership::machine::TopicPartition;
use consumer_membership::machine::events::{CloseOptions, CommitOffset, Event};
use consumer_membership::machine::metadata::ClusterMetadata;
use consumer_membership::request::{Request, Target};
use consumer_membership::transport::{TcpTransport, Transport};
use consumer_membership::{ClientConfig, MemberIdFile, driver};
use kafka_protocol::messages::ApiKey;

/// Joins a consumer group, prints the records of its partitions and commits them.
#[derive(Debug, Parser)]
#[command(name = "consumer", args_override_self = true)]
#[command(mut_arg(
    "group",
    fetch::group_arg("Consumer group to join (group.id)", "consumer-membership-example")
))]
struct Args {
    #[command(flatten)]
    connect: fetch::GroupArgs,
    /// Topic to subscribe to; without it the example stops once it has found the coordinator
    #[arg(long, value_name = "TOPIC")]
    topic: Option<String>,
    /// Join as a static member with this group.instance.id
    #[arg(long, value_name = "ID")]
    instance_id: Option<String>,
    /// Group protocol (group.protocol); auto falls back to classic on brokers without KIP-848
    #[arg(long, value_enum, default_value_t = Protocol::Classic)]
    protocol: Protocol,
    /// Write N records ("record-0", ...) to the topic before joining
    #[arg(long, value_name = "N", default_value_t = 0)]
    produce: usize,
    /// Commit and close after N seconds [default: on Ctrl-C]
    #[arg(long, value_name = "N")]
    seconds: Option<u64>,
    /// Commit and close once N records have been consumed
    #[arg(long, value_name = "N")]
    max_records: Option<usize>,
    /// Count the records instead of printing them
    #[arg(long)]
    quiet: bool,
    /// Keep the member id in this file across runs (with --instance-id: a restart after a crash
    /// comes back as itself instead of waiting for the old session to expire)
    #[arg(long, value_name = "PATH")]
    member_id_file: Option<std::path::PathBuf>,
}

/// `--protocol`.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Protocol {
    Classic,
    Consumer,
    Auto,
}

impl From<Protocol> for GroupProtocol {
    fn from(p: Protocol) -> Self {
        match p {
            Protocol::Classic => GroupProtocol::Classic,
            Protocol::Consumer => GroupProtocol::Consumer,
            Protocol::Auto => GroupProtocol::Auto,
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut shutdown = shutdown::Shutdown::register();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let Args {
        connect: fetch::GroupArgs { bootstrap, group },
        topic,
        instance_id,
        protocol,
        produce,
        seconds,
        max_records,
        quiet,
        member_id_file,
    } = Args::parse();
    let bootstrap = fetch::bootstrap_or_exit(bootstrap);

    let config = ClientConfig::new(&bootstrap)?;
    let transport = Arc::new(TcpTransport::new(config.clone()));

    let versions = transport.broker_versions(&Target::Bootstrap).await?;
    for api in [
        ApiKey::FindCoordinator,
        ApiKey::JoinGroup,
        ApiKey::SyncGroup,
        ApiKey::Heartbeat,
        ApiKey::LeaveGroup,
        ApiKey::ConsumerGroupHeartbeat,
        ApiKey::OffsetCommit,
        ApiKey::OffsetFetch,
    ] {
        match versions.get(api) {
            Some(r) => println!("broker serves {api:?} v{}-v{}", r.start(), r.end()),
            None => println!("broker does not serve {api:?}"),
        }
    }

    let metadata = transport
        .send(
            Target::Bootstrap,
            Request::Metadata {
                topics: None,
                allow_auto_topic_creation: false,
            },
            config.request_timeout,
        )
        .await?;
    let metadata = ClusterMetadata::from_response(&metadata)?;
    println!(
        "cluster {} with {} broker(s), {} topic(s)",
        metadata.cluster_id.as_deref().unwrap_or("?"),
        metadata.brokers.len(),
        metadata.topics.len()
    );

    let started = Instant::now();
    let coordinator = driver::find_coordinator(&transport, &config, &group).await?;
    println!(
        "group {group:?}: coordinator is {coordinator} (found in {:?})",
        started.elapsed()
    );

    let Some(topic) = topic else { return Ok(()) };
    // Let the broker auto-create the topic if it does not exist yet.
    transport
        .send(
            Target::Bootstrap,
            Request::Metadata {
                topics: Some(vec![topic.clone()]),
                allow_auto_topic_creation: true,
            },
            config.request_timeout,
        )
        .await?;
    if produce > 0 {
        produce_demo_records(&transport, &topic, produce, config.request_timeout).await?;
    }

    let mut group_config = GroupConfig::new(&group);
    group_config.instance_id = instance_id;
    group_config.protocol = protocol.into();
    // Held for the member's life: the file's lock refuses a second process.
    let kept = member_id_file.map(MemberIdFile::open).transpose()?;
    if let Some(kept) = &kept {
        group_config = kept.configure(group_config);
        let origin = if kept.kept() {
            "kept from an earlier run"
        } else {
            "new"
        };
        println!("member id {} ({origin})", kept.member_id());
    }
    // A transport of its own: the member's JoinGroup may be parked by the broker for a while.
    let member_transport = Arc::new(TcpTransport::new(config.clone()));
    let mut member = GroupMember::start(member_transport, group_config)?;
    member.subscribe([topic]).await?;
    let handle = member.handle();

    let stop = async {
        match seconds {
            Some(s) => tokio::time::sleep(std::time::Duration::from_secs(s)).await,
            None => shutdown.requested().await,
        }
    };
    tokio::pin!(stop);
    // Next offset to fetch for each owned partition.
    let mut positions: BTreeMap<TopicPartition, i64> = BTreeMap::new();
    let mut consumed = 0usize;
    // When the first and the last batch of records arrived.
    let mut span: Option<(Instant, Instant)> = None;
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(200));
    loop {
        tokio::select! {
            _ = &mut stop => break,
            event = member.next_event() => match event {
                Some(Event::Assigned { added, owned, generation }) => {
                    println!("assigned {} (generation/epoch {generation}, owns {} partitions)", list(&added), owned.len());
                    start_positions(&handle, &transport, &added, &mut positions, config.request_timeout).await;
                }
                Some(Event::Revoking { partitions, ticket }) => {
                    // Fetching is this loop's own, so it stopped already: commit what was consumed
                    // of the partitions going away, then hand the ticket back, even if the
                    // commit failed (`commit` prints the failure).
                    commit(&handle, &positions, Some(&partitions)).await;
                    for p in &partitions {
                        positions.remove(p);
                    }
                    println!("revoked {}", list(&partitions));
                    member.complete_revocation(ticket).await?;
                }
                Some(Event::Revoked { partitions } | Event::Lost { partitions, .. }) => {
                    for p in &partitions {
                        positions.remove(p);
                    }
                }
                Some(Event::InstanceHeld { instance_id, limit }) => {
                    println!("instance id {instance_id} held by an earlier incarnation: waiting up to {limit:?} for its session to end");
                }
                Some(Event::Fatal(e)) => return Err(e.into()),
                Some(Event::StateChanged { from, to, reason, member_id, generation }) => {
                    println!("member {member_id}: {from} -> {to} ({reason}), generation/epoch {generation}");
                }
                Some(_) => {}
                None => break,
            },
            _ = tick.tick() => {
                let got = fetch_once(&transport, &mut positions, &config, quiet).await;
                if got > 0 {
                    let now = Instant::now();
                    span = Some(span.map_or((now, now), |(first, _)| (first, now)));
                    consumed += got;
                    commit(&handle, &positions, None).await;
                    // Behind the log end: fetch again at once rather than at the next tick.
                    tick.reset_immediately();
                }
                if max_records.is_some_and(|n| consumed >= n) {
                    break;
                }
            }
        }
    }
    commit(&handle, &positions, None).await;
    if let Some(s) = member.snapshot().await {
        let ms = span.map_or(0.0, |(first, last)| (last - first).as_secs_f64() * 1e3);
        println!(
            "closing: consumed {consumed} records in {ms:.0} ms from the first to the last; \
             member {} generation/epoch {} owns {}",
            s.member_id,
            s.generation,
            list(&s.assignment)
        );
    }
    let outcome = member.close(CloseOptions::Default).await;
    println!("closed: {outcome:?}");
    // The leave's events (released partitions, state changes, Closed) still arrive: drain them.
    while let Some(event) = member.next_event().await {
        if let Event::StateChanged {
            from, to, reason, ..
        } = event
        {
            println!("{from} -> {to} ({reason})");
        }
    }
    Ok(())
}

/// Where to start each newly assigned partition: its committed offset, else (no commit:
/// `offset: None`) where `auto.offset.reset=earliest` says, the log start offset.
async fn start_positions(
    handle: &MemberHandle,
    transport: &TcpTransport,
    added: &[TopicPartition],
    positions: &mut BTreeMap<TopicPartition, i64>,
    timeout: std::time::Duration,
) {
    if added.is_empty() {
        return;
    }
    let committed = handle.committed(added.to_vec()).await.unwrap_or_default();
    let mut missing = Vec::new();
    for tp in added {
        match committed.get(tp).and_then(|c| c.offset) {
            Some(offset) => drop(positions.insert(tp.clone(), offset)),
            None => missing.push(tp.clone()),
        }
    }
    if missing.is_empty() {
        return;
    }
    let topics: Vec<String> = missing.iter().map(|tp| tp.topic.to_string()).collect();
    let Ok(leaders) = fetch::leaders(transport, &topics, timeout).await else {
        return;
    };
    for tp in missing {
        let Ok(leader) = leaders.leader(&tp) else {
            continue;
        };
        if let Ok(offsets) = fetch::list_offsets(
            transport,
            leader,
            std::slice::from_ref(&tp),
            fetch::OffsetReset::Earliest,
            timeout,
        )
        .await
            && let Some(Ok(offset)) = offsets.get(&tp)
        {
            positions.insert(tp, *offset);
        }
    }
}

/// One fetch round over every owned partition; prints the records and returns how many.
async fn fetch_once(
    transport: &TcpTransport,
    positions: &mut BTreeMap<TopicPartition, i64>,
    config: &ClientConfig,
    quiet: bool,
) -> usize {
    if positions.is_empty() {
        return 0;
    }
    let topics: Vec<String> = positions.keys().map(|tp| tp.topic.to_string()).collect();
    let Ok(leaders) = fetch::leaders(transport, &topics, config.request_timeout).await else {
        return 0;
    };
    let mut by_leader: BTreeMap<
        i32,
        (
            consumer_membership::request::Broker,
            Vec<(TopicPartition, i64)>,
        ),
    > = BTreeMap::new();
    for (tp, offset) in positions.iter() {
        if let Ok(leader) = leaders.leader(tp) {
            by_leader
                .entry(leader.node_id)
                .or_insert_with(|| (leader.clone(), Vec::new()))
                .1
                .push((tp.clone(), *offset));
        }
    }
    let options = fetch::FetchOptions {
        max_wait: std::time::Duration::from_millis(100),
        ..Default::default()
    };
    let mut count = 0;
    for (leader, wanted) in by_leader.values() {
        let Ok(answers) = fetch::fetch(transport, leader, wanted, &options).await else {
            continue;
        };
        for (tp, answer) in answers {
            let Ok(fetched) = answer else { continue };
            for r in fetched.records.iter().filter(|_| !quiet) {
                let value = r
                    .value
                    .as_deref()
                    .map(String::from_utf8_lossy)
                    .unwrap_or_default();
                println!("{tp}@{}: {value}", r.offset);
            }
            count += fetched.records.len();
            if let Some(next) = fetched.next_offset
                && let Some(p) = positions.get_mut(&tp)
            {
                *p = next;
            }
        }
    }
    count
}

/// Commits the positions (of `only`, when given); a failure is printed, not fatal.
async fn commit(
    handle: &MemberHandle,
    positions: &BTreeMap<TopicPartition, i64>,
    only: Option<&[TopicPartition]>,
) {
    let offsets: Vec<CommitOffset> = positions
        .iter()
        .filter(|(tp, _)| only.is_none_or(|o| o.contains(tp)))
        .map(|(tp, offset)| CommitOffset::new(tp.clone(), *offset))
        .collect();
    if offsets.is_empty() {
        return;
    }
    match handle.commit(offsets).await {
        Ok(()) => {}
        Err(e) => eprintln!("commit failed: {e}"),
    }
}

/// A record's key and value.
type KeyValue = (Option<bytes::Bytes>, Option<bytes::Bytes>);

/// Writes `n` records "record-0".."record-{n-1}" round robin over the topic's partitions.
async fn produce_demo_records(
    transport: &TcpTransport,
    topic: &str,
    n: usize,
    timeout: std::time::Duration,
) -> Result<(), Box<dyn std::error::Error>> {
    // A fresh auto-created topic may need a moment for its leader.
    let mut leaders = fetch::leaders(transport, &[topic.to_owned()], timeout).await?;
    for _ in 0..50 {
        if !leaders.partitions_of(topic).is_empty()
            && leaders.partitions.values().all(|l| l.is_some())
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        leaders = fetch::leaders(transport, &[topic.to_owned()], timeout).await?;
    }
    let partitions = leaders.partitions_of(topic);
    if partitions.is_empty() {
        return Err(format!("topic {topic} has no partitions").into());
    }
    let mut per_partition: BTreeMap<i32, Vec<KeyValue>> = BTreeMap::new();
    for i in 0..n {
        let p = partitions[i % partitions.len()];
        per_partition
            .entry(p)
            .or_default()
            .push((None, Some(bytes::Bytes::from(format!("record-{i}")))));
    }
    for (p, records) in per_partition {
        let tp = TopicPartition::new(topic, p);
        let leader = leaders.leader(&tp)?;
        fetch::produce(transport, leader, &tp, &records, timeout).await?;
    }
    println!("produced {n} records to {topic}");
    Ok(())
}

/// Partitions as Kafka tools print them: `[demo-0, demo-1]`.
fn list(partitions: &[TopicPartition]) -> String {
    let names: Vec<String> = partitions.iter().map(ToString::to_string).collect();
    format!("[{}]", names.join(", "))
}
