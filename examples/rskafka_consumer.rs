//! A consumer-group consumer made of two crates: this one for the group (membership, offsets),
//! [rskafka](https://docs.rs/rskafka) for the records (one `PartitionClient` fetch task per owned
//! partition).
//!
//! ```text
//! cargo run --example rskafka_consumer -- --properties consumer.properties --topic orders
//! ```
//!
//! The properties file holds the group and the client settings (`bootstrap.servers`, `group.id`,
//! `group.protocol`, `group.instance.id`, `security.protocol`, `sasl.*`, `ssl.*`, ... see
//! `consumer_membership::properties`) plus `auto.offset.reset` (`earliest` or `latest`, the
//! default); other keys are reported as unused. Both clients get its TLS settings (the same
//! rustls config: `transport::tls_client_config`) and SASL settings. Compressed batches other
//! than gzip and snappy need rskafka's `compression-lz4` and `compression-zstd` features.
//!
//! `--membership-thread` runs the membership on a runtime of its own, on a thread named
//! `membership` (`GroupMember::start_on`), so heartbeats never wait behind record processing.
//!
//! Each record is printed as one `record topic=.. partition=.. offset=..` line (counted only with
//! `--quiet`) and its offset committed every `--commit-interval-ms`, and before a revocation is
//! handed back; lost partitions are dropped without a commit. Ctrl-C (or `--max-records`) stops
//! the fetch tasks, commits, closes and drains the member's last events.
//!
//! Ownership and commits are printed too (not with `--quiet`), with `ts_ms` the wall clock in
//! milliseconds since the epoch: `owned topic=.. partition=.. offset=START member=..
//! generation=.. ts_ms=..` when a partition's fetch task starts, `released topic=..
//! partition=.. how=revoked|lost|closed ts_ms=..` once it has stopped, and `committed topic=..
//! partition=.. offset=.. ts_ms=..` for each offset the coordinator accepted. A record line's
//! `ts_ms` is the record's own timestamp.

#[path = "common/shutdown.rs"]
mod shutdown;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use consumer_membership::config::{SaslMechanism, SecurityProtocol};
use consumer_membership::{
    ClientConfig, CloseOptions, CloseOutcome, CommitOffset, Event, GroupConfig, GroupMember,
    MemberHandle, OffsetReset, TcpTransport, TopicPartition, properties,
};
use rskafka::client::partition::{OffsetAt, PartitionClient, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder, Credentials, SaslConfig};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Joins a group from a properties file and prints (or counts) the records of its partitions.
#[derive(Debug, Parser)]
pub struct Args {
    /// Kafka properties file: group, client, TLS and SASL settings, `auto.offset.reset`
    #[arg(long, value_name = "FILE")]
    pub properties: PathBuf,
    /// Topic to consume
    #[arg(long)]
    pub topic: String,
    /// Count the records instead of printing them (and print no ownership or commit lines)
    #[arg(long)]
    pub quiet: bool,
    /// How often processed offsets are committed
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub commit_interval_ms: u64,
    /// Stop after this many records
    #[arg(long, value_name = "N")]
    pub max_records: Option<u64>,
    /// Run the membership on its own runtime, on a thread named `membership`
    #[arg(long)]
    pub membership_thread: bool,
}

/// One processed record.
#[derive(Debug, Clone)]
pub struct Processed {
    pub partition: TopicPartition,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub member: String,
    pub generation: i32,
    pub ts_ms: i64,
}

impl std::fmt::Display for Processed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = self.key.as_deref().map(String::from_utf8_lossy);
        write!(
            f,
            "record topic={} partition={} offset={} key={} member={} generation={} ts_ms={}",
            self.partition.topic,
            self.partition.partition,
            self.offset,
            key.as_deref().unwrap_or("-"),
            self.member,
            self.generation,
            self.ts_ms
        )
    }
}

/// What a run did.
#[derive(Debug)]
pub struct Report {
    pub processed: u64,
    pub close: CloseOutcome,
}

/// A current-thread runtime driven by a thread named `membership` until the returned guard is
/// dropped.
fn membership_runtime() -> Result<(tokio::runtime::Handle, oneshot::Sender<()>), BoxError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let handle = runtime.handle().clone();
    let (guard, dropped) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("membership".into())
        .spawn(move || drop(runtime.block_on(dropped)))?;
    Ok((handle, guard))
}

/// A partition's fetch task: it stores the next offset to process in `next`, and stops when
/// `stop` is dropped.
struct Fetcher {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
    next: Arc<AtomicI64>,
}

/// Runs the consumer until `stop` completes (or `--max-records`); `on_record` sees each record.
pub async fn run(
    args: &Args,
    stop: impl Future<Output = ()>,
    on_record: impl Fn(&Processed) + Send + Sync + 'static,
) -> Result<Report, BoxError> {
    let (client, group, reset) = load(&args.properties)?;
    let records = Arc::new(rskafka_client(&client).await?);
    let transport = Arc::new(TcpTransport::new(client));
    let (mut member, _membership) = match args.membership_thread {
        false => (GroupMember::start(transport, group)?, None),
        true => {
            let (runtime, thread) = membership_runtime()?;
            (
                GroupMember::start_on(&runtime, transport, group)?,
                Some(thread),
            )
        }
    };
    member.subscribe([args.topic.clone()]).await?;
    let handle = member.handle();

    let on_record: Arc<dyn Fn(&Processed) + Send + Sync> = Arc::new(on_record);
    let processed = Arc::new(AtomicU64::new(0));
    let (label, _) = watch::channel((String::new(), -1)); // member id, generation
    let mut fetchers = BTreeMap::<TopicPartition, Fetcher>::new();
    let mut committed = BTreeMap::<TopicPartition, i64>::new();
    let mut tick = tokio::time::interval(Duration::from_millis(args.commit_interval_ms));
    let done = |n: u64| args.max_records.is_some_and(|max| n >= max);
    let log = !args.quiet;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick() => {
                commit(&handle, positions(&fetchers), &mut committed, None, log).await;
                if done(processed.load(Ordering::Relaxed)) { break }
            }
            event = member.next_event() => match event {
                Some(Event::StateChanged { member_id, generation, .. }) => {
                    label.send_replace((member_id, generation));
                }
                Some(Event::Assigned { added, generation, .. }) => {
                    label.send_modify(|l| l.1 = generation);
                    let starts = handle.committed(added.clone()).await?;
                    let member_id = label.borrow().0.clone();
                    for tp in added {
                        let (topic, retry) = (tp.topic.to_string(), UnknownTopicHandling::Retry);
                        let pc = records.partition_client(topic, tp.partition, retry).await?;
                        // No commit yet (`offset: None`): where auto.offset.reset says.
                        let start = match starts.get(&tp).and_then(|c| c.offset) {
                            Some(offset) => offset,
                            None => pc.get_offset(reset).await?,
                        };
                        committed.insert(tp.clone(), start);
                        if !args.quiet {
                            let (topic, p, ts) = (&tp.topic, tp.partition, now_ms());
                            println!(
                                "owned topic={topic} partition={p} offset={start} \
                                 member={member_id} generation={generation} ts_ms={ts}"
                            );
                        }
                        let (stop, stopped) = oneshot::channel();
                        let next = Arc::new(AtomicI64::new(start));
                        let ctx = (tp.clone(), next.clone(), label.subscribe());
                        let ctx = (ctx, on_record.clone(), processed.clone());
                        let task = tokio::spawn(fetch(pc, ctx, stopped));
                        fetchers.insert(tp, Fetcher { stop, task, next });
                    }
                }
                Some(Event::Revoking { partitions, ticket }) => {
                    // Stop, commit, hand back; a failed commit is reported by `commit` and the
                    // ticket goes back anyway (else the member stalls until max.poll.interval.ms).
                    let stopped = stop_fetchers(&mut fetchers, &partitions, "revoked", log).await;
                    commit(&handle, stopped, &mut committed, Some(&partitions), log).await;
                    member.complete_revocation(ticket).await?;
                }
                Some(Event::Lost { partitions, reason }) => {
                    eprintln!("lost {partitions:?} ({reason}): not committing them");
                    stop_fetchers(&mut fetchers, &partitions, "lost", log).await;
                    committed.retain(|tp, _| !partitions.contains(tp));
                }
                Some(Event::TopicsMissing { topics }) => eprintln!("not created yet: {topics:?}"),
                Some(Event::Fatal(error)) => return Err(error.into()),
                Some(_) => {}
                None => break,
            },
        }
    }
    let owned: Vec<TopicPartition> = fetchers.keys().cloned().collect();
    let stopped = stop_fetchers(&mut fetchers, &owned, "closed", log).await;
    commit(&handle, stopped, &mut committed, None, log).await;
    let close = member.close(CloseOptions::Default).await;
    while member.next_event().await.is_some() {} // Revoked, StateChanged, Closed
    let processed = processed.load(Ordering::Relaxed);
    Ok(Report { processed, close })
}

/// A fetch task's partition, position, (member id, generation), record callback and counter.
type FetchContext = (
    (
        TopicPartition,
        Arc<AtomicI64>,
        watch::Receiver<(String, i32)>,
    ),
    Arc<dyn Fn(&Processed) + Send + Sync>,
    Arc<AtomicU64>,
);

/// Fetches and processes one partition until told to stop; a stop cancels a fetch in flight,
/// never a batch being processed.
async fn fetch(pc: PartitionClient, ctx: FetchContext, mut stop: oneshot::Receiver<()>) {
    let ((partition, next, label), on_record, processed) = ctx;
    loop {
        let offset = next.load(Ordering::Relaxed);
        let fetched = tokio::select! {
            _ = &mut stop => return,
            fetched = pc.fetch_records(offset, 1..1_048_576, 500) => fetched,
        };
        let records = match fetched {
            Ok((records, _high_watermark)) => records,
            Err(e) => {
                eprintln!("fetch {partition} at {offset}: {e}");
                tokio::select! {
                    _ = &mut stop => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                }
            }
        };
        let (member, generation) = label.borrow().clone();
        for r in records.into_iter().filter(|r| r.offset >= offset) {
            on_record(&Processed {
                partition: partition.clone(),
                offset: r.offset,
                key: r.record.key,
                member: member.clone(),
                generation,
                ts_ms: r.record.timestamp.timestamp_millis(),
            });
            processed.fetch_add(1, Ordering::Relaxed);
            next.store(r.offset + 1, Ordering::Relaxed);
        }
    }
}

/// Where each task is: the next offset to process of each partition.
fn positions(fetchers: &BTreeMap<TopicPartition, Fetcher>) -> BTreeMap<TopicPartition, i64> {
    let at = |(tp, f): (&TopicPartition, &Fetcher)| (tp.clone(), f.next.load(Ordering::Relaxed));
    fetchers.iter().map(at).collect()
}

/// Milliseconds since the epoch.
fn now_ms() -> u128 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.unwrap_or_default().as_millis()
}

/// Stops the tasks of `partitions` and waits until they have (printing a `released` line each
/// when `log`); returns their final positions.
async fn stop_fetchers(
    fetchers: &mut BTreeMap<TopicPartition, Fetcher>,
    partitions: &[TopicPartition],
    how: &str,
    log: bool,
) -> BTreeMap<TopicPartition, i64> {
    let stopping: Vec<_> = partitions
        .iter()
        .filter_map(|tp| fetchers.remove_entry(tp))
        .collect();
    let mut positions = BTreeMap::new();
    for (tp, Fetcher { stop, task, next }) in stopping {
        drop(stop); // the task sees its stop channel closed
        let _ = task.await;
        if log {
            let (topic, p, ts) = (&tp.topic, tp.partition, now_ms());
            println!("released topic={topic} partition={p} how={how} ts_ms={ts}");
        }
        positions.insert(tp, next.load(Ordering::Relaxed));
    }
    positions
}

/// Commits the positions that moved since their last commit (of `only`, when given, which are
/// then forgotten); a failed commit is reported and tried again at the next one. Each accepted
/// offset is printed as a `committed` line when `log`.
async fn commit(
    handle: &MemberHandle,
    positions: BTreeMap<TopicPartition, i64>,
    committed: &mut BTreeMap<TopicPartition, i64>,
    only: Option<&[TopicPartition]>,
    log: bool,
) {
    let offsets: Vec<CommitOffset> = positions
        .into_iter()
        .filter(|(tp, offset)| committed.get(tp) != Some(offset))
        .map(|(partition, offset)| CommitOffset::new(partition, offset))
        .collect();
    if !offsets.is_empty() {
        match handle.commit(offsets.clone()).await {
            Ok(()) => {
                let ts = now_ms();
                for c in offsets {
                    let (topic, p, offset) = (&c.partition.topic, c.partition.partition, c.offset);
                    if log {
                        println!(
                            "committed topic={topic} partition={p} offset={offset} ts_ms={ts}"
                        );
                    }
                    committed.insert(c.partition, offset);
                }
            }
            Err(e) => eprintln!("commit failed: {e}"),
        }
    }
    if let Some(only) = only {
        committed.retain(|tp, _| !only.contains(tp));
    }
}

/// The properties file's group and client configs, and `auto.offset.reset`.
pub fn load(path: &std::path::Path) -> Result<(ClientConfig, GroupConfig, OffsetAt), BoxError> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (props, mut rest) = properties::split_properties(properties::parse_properties(&text)?);
    let reset = match properties::offset_reset(&rest)? {
        OffsetReset::Earliest => OffsetAt::Earliest,
        OffsetReset::Latest => OffsetAt::Latest,
        other => return Err(format!("auto.offset.reset {other:?} is not mapped").into()),
    };
    rest.remove("auto.offset.reset");
    if !rest.is_empty() {
        eprintln!("unused properties: {:?}", rest.keys().collect::<Vec<_>>());
    }
    let (client, group) = properties::from_properties(&props)?;
    Ok((client, group, reset))
}

/// An rskafka client with the same brokers, client id, TLS and SASL settings.
async fn rskafka_client(config: &ClientConfig) -> Result<Client, BoxError> {
    let s = &config.security;
    let mut builder =
        ClientBuilder::new(config.bootstrap_servers.clone()).client_id(config.client_id.as_str());
    if matches!(
        s.protocol,
        SecurityProtocol::Ssl | SecurityProtocol::SaslSsl
    ) {
        builder = builder.tls_config(consumer_membership::transport::tls_client_config(s)?);
    }
    if let (Some(mechanism), Some(user), Some(password)) =
        (s.sasl_mechanism, &s.sasl_username, &s.sasl_password)
    {
        let credentials = Credentials::new(user.clone(), password.expose().to_owned());
        builder = builder.sasl_config(match mechanism {
            SaslMechanism::Plain => SaslConfig::Plain(credentials),
            SaslMechanism::ScramSha256 => SaslConfig::ScramSha256(credentials),
            SaslMechanism::ScramSha512 => SaslConfig::ScramSha512(credentials),
            other => {
                return Err(format!("sasl.mechanism {other:?} is not mapped to rskafka").into());
            }
        });
    }
    Ok(builder.build().await?)
}

#[allow(dead_code)] // tests/rskafka_pairing.rs calls `run`
#[tokio::main]
async fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let mut shutdown = shutdown::Shutdown::register();
    let args = Args::parse();
    let quiet = args.quiet;
    let stop = async move { shutdown.requested().await };
    // When the first and the last record were processed.
    let span = Arc::new(std::sync::Mutex::new(None::<(Instant, Instant)>));
    let seen = span.clone();
    let report = run(&args, stop, move |r| {
        let now = Instant::now();
        let mut span = seen.lock().unwrap_or_else(|e| e.into_inner());
        *span = Some(span.map_or((now, now), |(first, _)| (first, now)));
        if !quiet {
            println!("{r}")
        }
    })
    .await?;
    let span = *span.lock().unwrap_or_else(|e| e.into_inner());
    let ms = span.map_or(0.0, |(first, last)| (last - first).as_secs_f64() * 1e3);
    println!(
        "processed {} records in {ms:.0} ms from the first to the last; close: {:?}",
        report.processed, report.close
    );
    Ok(())
}
