//! Example group member: connects, negotiates API versions, finds the group's coordinator, then
//! joins the group as a classic member (static with `--instance-id`) and prints what happens
//! until Ctrl-C or `--seconds` pass, and closes with the default leave semantics.
//!
//! ```text
//! tests/kafka/with-broker.sh cargo run --example consumer -- --group demo --topic demo --seconds 10
//! cargo run --example consumer -- --bootstrap 127.0.0.1:9092 --group demo --topic orders --instance-id w1
//! ```
//! Without `--bootstrap` it uses `KAFKA_BOOTSTRAP`, then the broker that tests/kafka/broker.sh
//! started (target/kafka-it/bootstrap).

use std::sync::Arc;
use std::time::Instant;

use consumer_membership::config::GroupConfig;
use consumer_membership::core::events::{CloseOptions, Event};
use consumer_membership::core::io::{Request, Target};
use consumer_membership::core::metadata::ClusterMetadata;
use consumer_membership::driver::GroupMember;
use consumer_membership::transport::{TcpTransport, Transport};
use consumer_membership::{ClientConfig, driver};
use kafka_protocol::messages::ApiKey;

fn usage() -> ! {
    eprintln!(
        "usage: consumer [--bootstrap HOST:PORT[,...]] [--group GROUP] [--topic TOPIC] [--instance-id ID] [--seconds N]"
    );
    std::process::exit(2)
}

fn local_bootstrap() -> Option<String> {
    if let Ok(b) = std::env::var("KAFKA_BOOTSTRAP") {
        return Some(b);
    }
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/target/kafka-it/bootstrap");
    std::fs::read_to_string(file)
        .ok()
        .map(|s| s.trim().to_owned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let mut bootstrap = None;
    let mut group = "consumer-membership-example".to_owned();
    let mut topic: Option<String> = None;
    let mut instance_id: Option<String> = None;
    let mut seconds: Option<u64> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bootstrap" => bootstrap = Some(args.next().unwrap_or_else(|| usage())),
            "--group" => group = args.next().unwrap_or_else(|| usage()),
            "--topic" => topic = Some(args.next().unwrap_or_else(|| usage())),
            "--instance-id" => instance_id = Some(args.next().unwrap_or_else(|| usage())),
            "--seconds" => {
                seconds = Some(
                    args.next()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or_else(|| usage()),
                )
            }
            _ => usage(),
        }
    }
    let Some(bootstrap) = bootstrap.or_else(local_bootstrap) else {
        eprintln!(
            "no broker: pass --bootstrap, set KAFKA_BOOTSTRAP, or run through tests/kafka/with-broker.sh"
        );
        std::process::exit(1)
    };

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
    let mut group_config = GroupConfig::new(&group);
    group_config.instance_id = instance_id;
    // A transport of its own: the member's JoinGroup may be parked by the broker for a while.
    let member_transport = Arc::new(TcpTransport::new(config.clone()));
    let mut member = GroupMember::start(member_transport, group_config)?;
    member.subscribe([topic]).await?;
    let stop = async {
        match seconds {
            Some(s) => tokio::time::sleep(std::time::Duration::from_secs(s)).await,
            None => drop(tokio::signal::ctrl_c().await),
        }
    };
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            event = member.next_event() => match event {
                Some(Event::Revoking { partitions, ticket }) => {
                    println!("revoking {partitions:?}");
                    // A real consumer commits the offsets it processed here, then hands the ticket back.
                    member.complete_revocation(ticket).await?;
                }
                Some(Event::Fatal(e)) => return Err(e.into()),
                Some(event) => println!("{event:?}"),
                None => break,
            },
        }
    }
    if let Some(s) = member.snapshot().await {
        println!(
            "closing: member {} generation {} owns {:?}",
            s.member_id, s.generation, s.assignment
        );
    }
    member.close(CloseOptions::Default).await;
    Ok(())
}
