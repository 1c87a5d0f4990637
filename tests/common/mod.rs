//! Shared helpers of the real-broker tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use consumer_membership::ClientConfig;
use consumer_membership::core::io::{Request, Response, Target};
use consumer_membership::transport::{TcpTransport, Transport};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{CreateTopicsRequest, RequestKind, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;

/// The address of the broker tests/kafka/with-broker.sh started (`KAFKA_BOOTSTRAP`).
///
/// Without one, a real-broker test is skipped with a message, except under `CI=true`, where it
/// fails: CI must never pass without having talked to Kafka.
pub fn bootstrap() -> Option<String> {
    match std::env::var("KAFKA_BOOTSTRAP") {
        Ok(b) if !b.trim().is_empty() => Some(b),
        _ if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!(
                "CI=true but KAFKA_BOOTSTRAP is not set: run the tests through tests/kafka/with-broker.sh"
            )
        }
        _ => {
            eprintln!(
                "SKIPPED: no KAFKA_BOOTSTRAP; run `tests/kafka/with-broker.sh cargo test` for the real-broker tests"
            );
            None
        }
    }
}

/// A transport to `bootstrap` with a short request timeout.
pub fn transport(bootstrap: &str) -> (Arc<TcpTransport>, ClientConfig) {
    let mut config = ClientConfig::new(bootstrap).unwrap();
    config.client_id = "consumer-membership-tests".into();
    config.request_timeout = Duration::from_secs(15);
    (Arc::new(TcpTransport::new(config.clone())), config)
}

/// A name no other test (or earlier run) uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", consumer_membership::MemberId::generate())
}

/// Creates `topic` with `partitions` partitions (replication factor -1: the broker default).
pub async fn create_topic<T: Transport>(t: &T, topic: &str, partitions: i32) {
    let body = CreateTopicsRequest::default()
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.into())))
                .with_num_partitions(partitions)
                .with_replication_factor(-1),
        ])
        .with_timeout_ms(15_000);
    let r: Response = t
        .send(
            Target::Bootstrap,
            Request::Raw {
                body: Box::new(RequestKind::CreateTopics(body)),
                versions: 5..=7,
            },
            Duration::from_secs(20),
        )
        .await
        .expect("CreateTopics answered");
    let ResponseKind::CreateTopics(r) = r.body else {
        panic!("not a CreateTopics answer")
    };
    assert_eq!(
        r.topics[0].error_code, 0,
        "CreateTopics {topic}: {:?}",
        r.topics[0].error_message
    );
}

/// A 3-node KRaft cluster of its own, started by tests/kafka/broker.sh and stopped on drop.
pub struct Cluster {
    pub bootstrap: String,
    dir: PathBuf,
}

impl Cluster {
    pub fn start(name: &str) -> Cluster {
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let dir = repo.join("target").join(name);
        let out = Command::new(repo.join("tests/kafka/broker.sh"))
            .args(["start", "--nodes", "3", "--dir"])
            .arg(&dir)
            .output()
            .expect("run tests/kafka/broker.sh");
        assert!(
            out.status.success(),
            "3-node start failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8(out.stdout).unwrap();
        let bootstrap = stdout
            .lines()
            .last()
            .expect("bootstrap line")
            .trim()
            .to_owned();
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
        Cluster { bootstrap, dir }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let _ = Command::new(repo.join("tests/kafka/broker.sh"))
            .args(["stop", "--dir"])
            .arg(&self.dir)
            .output();
    }
}
