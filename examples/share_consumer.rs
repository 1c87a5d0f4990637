//! Example share-group consumer (KIP-932, Kafka 4.2+): joins a share group, receives the records
//! the broker acquires for it, processes and acknowledges each range, and on Ctrl-C (or after
//! `--seconds` / `--max-records`) sends its pending acknowledgements and leaves.
//!
//! ```text
//! tests/kafka/with-broker.sh cargo run --example share_consumer -- --group jobs --topic jobs --produce 10 --seconds 10
//! cargo run --example share_consumer -- --bootstrap 127.0.0.1:9092 --group jobs --topic jobs --ack release-first
//! ```
//! Without `--bootstrap` it uses `KAFKA_BOOTSTRAP`, then the broker that tests/kafka/broker.sh
//! started (target/kafka-it/bootstrap). `--produce N` first writes N records to the topic. A
//! new share group starts at the latest offset (the group config `share.auto.offset.reset`):
//! `--earliest` sets it to `earliest` first (IncrementalAlterConfigs on the group).
//!
//! `--json` prints one line per event for programs that watch it: `{"event":"record",...}`
//! when a record is processed, `{"event":"acked",...}` when the broker answered an
//! acknowledgement (`"ok":true` or the error), `{"event":"stats",...}` at the end.

#[path = "common/fetch.rs"]
mod fetch;
#[path = "common/shutdown.rs"]
mod shutdown;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Parser, ValueEnum};
use consumer_membership::config::GroupConfig;
use consumer_membership::kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use consumer_membership::kafka_protocol::messages::{
    IncrementalAlterConfigsRequest, RequestKind, ResponseKind,
};
use consumer_membership::kafka_protocol::protocol::StrBytes;
use consumer_membership::machine::TopicPartition;
use consumer_membership::machine::events::{CloseOptions, Event};
use consumer_membership::request::{Request, Target};
use consumer_membership::share::{
    AckMode, AcknowledgeType, Acknowledged, ShareEvent, ShareFetchSettings, ShareGroupMember,
};
use consumer_membership::transport::{TcpTransport, Transport};
use consumer_membership::{ClientConfig, MemberId};

/// Joins a share group and processes the records acquired for it.
#[derive(Debug, Parser)]
#[command(name = "share_consumer", args_override_self = true)]
#[command(mut_arg(
    "group",
    fetch::group_arg("Share group to join (group.id)", "consumer-membership-share")
))]
struct Args {
    #[command(flatten)]
    connect: fetch::GroupArgs,
    /// Topic to subscribe to
    #[arg(long, value_name = "TOPIC")]
    topic: String,
    /// How each record is acknowledged
    #[arg(long, value_enum, default_value_t = Ack::Accept)]
    ack: Ack,
    /// share.acknowledgement.mode=implicit: every record handed over is accepted by the next
    /// wait for records (--ack is then ignored)
    #[arg(long)]
    implicit: bool,
    /// Set the group's share.auto.offset.reset to earliest before joining
    #[arg(long)]
    earliest: bool,
    /// Write N records ("record-0", ...) to partition 0 of the topic before joining
    #[arg(long, value_name = "N", default_value_t = 0)]
    produce: usize,
    /// Close after N seconds [default: on Ctrl-C]
    #[arg(long, value_name = "N")]
    seconds: Option<u64>,
    /// Close once N records have been processed
    #[arg(long, value_name = "N")]
    max_records: Option<u64>,
    /// max.poll.records: at most this many records per fetch
    #[arg(long, value_name = "N", default_value_t = 500)]
    max_poll_records: i32,
    /// One JSON line per record and acknowledgement instead of the summary lines
    #[arg(long)]
    json: bool,
    /// Count the records instead of printing them (the summary or stats line still comes)
    #[arg(long)]
    quiet: bool,
}

/// `--ack`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Ack {
    /// ACCEPT every record
    Accept,
    /// RELEASE every record (it is delivered again, up to the group's delivery count limit)
    Release,
    /// REJECT every record (never delivered again)
    Reject,
    /// RELEASE a record on its first delivery, ACCEPT it after
    ReleaseFirst,
}

impl Ack {
    fn kind(self, delivery_count: i16) -> AcknowledgeType {
        match self {
            Ack::Accept => AcknowledgeType::Accept,
            Ack::Release => AcknowledgeType::Release,
            Ack::Reject => AcknowledgeType::Reject,
            Ack::ReleaseFirst if delivery_count <= 1 => AcknowledgeType::Release,
            Ack::ReleaseFirst => AcknowledgeType::Accept,
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let mut shutdown = shutdown::Shutdown::register();
    let args = Args::parse();
    let bootstrap = fetch::bootstrap_or_exit(args.connect.bootstrap.clone());
    let config = ClientConfig::new(&bootstrap)?;
    let transport = Arc::new(TcpTransport::new(config.clone()));
    // Let the broker auto-create the topic if it does not exist yet.
    transport
        .send(
            Target::Bootstrap,
            Request::Metadata {
                topics: Some(vec![args.topic.clone()]),
                allow_auto_topic_creation: true,
            },
            config.request_timeout,
        )
        .await?;
    if args.produce > 0 {
        let tp = TopicPartition::new(&args.topic, 0);
        let records: Vec<_> = (0..args.produce)
            .map(|i| (None, Some(Bytes::from(format!("record-{i}")))))
            .collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        fetch::produce_settling(&*transport, &tp, &records, config.request_timeout, deadline)
            .await?;
    }
    if args.earliest {
        set_earliest(&*transport, &args.connect.group, config.request_timeout).await?;
    }

    let group = GroupConfig::new(&args.connect.group).with_member_id(MemberId::generate());
    let fetch = ShareFetchSettings {
        max_records: args.max_poll_records,
        batch_size: args.max_poll_records,
        ..ShareFetchSettings::default()
    };
    let mode = if args.implicit {
        AckMode::Implicit
    } else {
        AckMode::Explicit
    };
    // A transport of its own: the share fetches wait at the leaders.
    let member_transport = Arc::new(TcpTransport::new(config.clone()));
    let topics = vec![args.topic.clone()];
    let mut member = ShareGroupMember::start(member_transport, group, topics, fetch, mode)?;
    if !args.json {
        println!(
            "member id {}",
            member
                .snapshot()
                .await
                .map(|s| s.member_id)
                .unwrap_or_default()
        );
    }

    let stop = async {
        match args.seconds {
            Some(s) => tokio::time::sleep(Duration::from_secs(s)).await,
            None => shutdown.requested().await,
        }
    };
    tokio::pin!(stop);
    let (mut processed, mut acks) = (0u64, Acks::default());
    let started = Instant::now();
    // From the first record to the last: wall time and this process's CPU time.
    let mut span: Option<((Instant, Duration), (Instant, Duration))> = None;
    loop {
        let event = tokio::select! {
            _ = &mut stop => break,
            event = member.next_event() => event,
        };
        match event {
            Some(ShareEvent::Records { topic, records }) => {
                let tp = TopicPartition::new(&topic, records.partition.partition);
                let (decoded, _) = fetch::decode_records(&tp, records.records.clone(), 0)?;
                for range in &records.acquired {
                    let kind = args.ack.kind(range.delivery_count);
                    for r in
                        (decoded.iter()).filter(|r| (range.first..=range.last).contains(&r.offset))
                    {
                        let value = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default());
                        if args.quiet {
                            // Counted only.
                        } else if args.json {
                            println!(
                                "{}",
                                serde_json::json!({
                                    "event": "record",
                                    "partition": tp.partition,
                                    "offset": r.offset,
                                    "value": value,
                                    "delivery_count": range.delivery_count,
                                    "ack": format!("{kind:?}"),
                                })
                            );
                        } else {
                            println!(
                                "{tp} @{} (delivery {}): {value}",
                                r.offset, range.delivery_count
                            );
                        }
                        processed += 1;
                    }
                    let at = (Instant::now(), cpu_time());
                    span = Some(span.map_or((at, at), |(first, _)| (first, at)));
                    if mode == AckMode::Explicit {
                        member
                            .acknowledge(records.partition, range.first, range.last, kind)
                            .await?;
                    }
                }
            }
            Some(ShareEvent::Acknowledged(a)) => acks.report(&a, args.json),
            Some(ShareEvent::Member(Event::Assigned { owned, .. })) if !args.json => {
                println!("assigned {} partition(s)", owned.len());
            }
            Some(ShareEvent::Member(Event::Fatal(e))) => return Err(e.into()),
            Some(ShareEvent::FetchError(e)) if !args.json => println!("fetch: {e:?}"),
            Some(_) => {}
            None => break,
        }
        if args.max_records.is_some_and(|n| processed >= n) {
            break;
        }
    }
    let outcome = member.close(CloseOptions::Default).await;
    // The close's events (the last acknowledgements, Closed) still arrive: drain them.
    while let Some(event) = member.next_event().await {
        if let ShareEvent::Acknowledged(a) = event {
            acks.report(&a, args.json);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let (wall, cpu) = span.map_or((0.0, 0.0), |((t0, c0), (t1, c1))| {
        ((t1 - t0).as_secs_f64(), c1.saturating_sub(c0).as_secs_f64())
    });
    if args.json {
        println!(
            "{}",
            serde_json::json!({"event": "stats", "records": processed, "acked": acks.applied,
                "failed": acks.failed, "seconds": seconds, "first_to_last_s": wall,
                "cpu_first_to_last_s": cpu, "close": format!("{outcome:?}")})
        );
    } else {
        println!(
            "processed {processed} records in {seconds:.1} s; {} acknowledgements applied, \
             {} failed; closed: {outcome:?}",
            acks.applied, acks.failed
        );
    }
    Ok(())
}

/// Acknowledgements answered: applied, failed.
#[derive(Debug, Default)]
struct Acks {
    applied: u64,
    failed: u64,
}

impl Acks {
    /// Counts `a` and prints it (a JSON line with `json`, else only a failure).
    fn report(&mut self, a: &Acknowledged, json: bool) {
        match &a.result {
            Ok(()) => self.applied += 1,
            Err(_) => self.failed += 1,
        }
        if json {
            println!(
                "{}",
                serde_json::json!({
                    "event": "acked",
                    "partition": a.partition.partition,
                    "first": a.first,
                    "last": a.last,
                    "kind": format!("{:?}", a.kind),
                    "ok": a.result.is_ok(),
                    "error": a.result.as_ref().err().map(|e| e.to_string()),
                })
            );
        } else if let Err(e) = &a.result {
            println!("acknowledgement of {}..={} failed: {e}", a.first, a.last);
        }
    }
}

/// Sets the share group's `share.auto.offset.reset` to `earliest` (IncrementalAlterConfigs on
/// the GROUP resource, type 32).
async fn set_earliest<T: Transport>(
    transport: &T,
    group: &str,
    timeout: Duration,
) -> Result<(), Box<dyn std::error::Error>> {
    let config = AlterableConfig::default()
        .with_name(StrBytes::from_static_str("share.auto.offset.reset"))
        .with_config_operation(0)
        .with_value(Some(StrBytes::from_static_str("earliest")));
    let resource = AlterConfigsResource::default()
        .with_resource_type(32)
        .with_resource_name(StrBytes::from_string(group.to_owned()))
        .with_configs(vec![config]);
    let body = RequestKind::IncrementalAlterConfigs(
        IncrementalAlterConfigsRequest::default().with_resources(vec![resource]),
    );
    let request = Request::Raw {
        body: Box::new(body),
        versions: 0..=1,
        fit: None,
    };
    let answer = transport.send(Target::Bootstrap, request, timeout).await?;
    let Some(ResponseKind::IncrementalAlterConfigs(r)) = answer.kafka() else {
        return Err("not an IncrementalAlterConfigs answer".into());
    };
    for r in &r.responses {
        if r.error_code != 0 {
            return Err(format!(
                "share.auto.offset.reset: error {} {:?}",
                r.error_code, r.error_message
            )
            .into());
        }
    }
    Ok(())
}

/// This process's CPU time (user + system) so far, from `/proc/self/stat` (zero where that
/// cannot be read).
fn cpu_time() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // The fields after the command name (which may hold spaces) end with ')'; utime and stime
    // are fields 14 and 15, in clock ticks (100 per second on Linux).
    let fields: Vec<&str> = (stat.rsplit_once(')').map_or("", |x| x.1))
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}
