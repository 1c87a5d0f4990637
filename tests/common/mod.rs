//! Shared helpers of the real-broker tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use consumer_membership::ClientConfig;
use consumer_membership::config::GroupProtocol;
use consumer_membership::machine::events::MemberState;
use consumer_membership::request::{Request, Response, ResponseBody, Target};
use consumer_membership::transport::{TcpTransport, Transport};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{CreateTopicsRequest, RequestKind, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;

/// The address of the broker tests/kafka/with-broker.sh started (`KAFKA_BOOTSTRAP`).
///
/// Real-broker tests carry `#[cfg_attr(not(kafka_broker), ignore = ...)]`: build.rs sets
/// `kafka_broker` under with-broker.sh (`KAFKA_BROKER_TESTS=1`) and under `CI=true`, so without a
/// broker they are reported ignored, never passed. A real-broker test that runs finds its broker
/// here or fails: this is always `Some` (the `Option` suits the callers' `let Some(b) = ...`).
pub fn bootstrap() -> Option<String> {
    match std::env::var("KAFKA_BOOTSTRAP") {
        Ok(b) if !b.trim().is_empty() => Some(b),
        _ => panic!(
            "KAFKA_BOOTSTRAP is not set: run the real-broker tests through tests/kafka/with-broker.sh"
        ),
    }
}

/// The broker's address, or None after saying why (the test passes vacuously) when the broker
/// (`KAFKA_VERSION`, unset: the project's default release) is older than `since`, which `what`
/// needs.
#[allow(dead_code)]
pub fn bootstrap_since(since: (u32, u32), what: &str) -> Option<String> {
    let b = bootstrap()?;
    let version = std::env::var("KAFKA_VERSION").unwrap_or_default();
    let mut parts = version.trim().split('.').map(|p| p.parse::<u32>().ok());
    if let (Some(Some(major)), Some(Some(minor))) = (parts.next(), parts.next())
        && (major, minor) < since
    {
        eprintln!(
            "skipped: {what} needs Kafka {}.{} or later, the broker is {version}",
            since.0, since.1
        );
        return None;
    }
    Some(b)
}

/// Member ids the coordinator lists for `group` (ConsumerGroupDescribe, consumer groups; none
/// for a group the coordinator does not know). The describe goes to the bootstrap broker: with
/// one broker that is the coordinator.
pub async fn described_members(bootstrap: &str, group: &str) -> Vec<String> {
    use kafka_protocol::messages::{ConsumerGroupDescribeRequest, GroupId};
    let body = RequestKind::ConsumerGroupDescribe(
        ConsumerGroupDescribeRequest::default()
            .with_group_ids(vec![GroupId(StrBytes::from_string(group.into()))]),
    );
    let ResponseKind::ConsumerGroupDescribe(r) = ask(bootstrap, body, 0..=1).await else {
        panic!("not a ConsumerGroupDescribe answer")
    };
    let g = &r.groups[0];
    if g.error_code == 69 {
        return Vec::new(); // GROUP_ID_NOT_FOUND
    }
    assert_eq!(g.error_code, 0, "{:?}", g.error_message);
    g.members.iter().map(|m| m.member_id.to_string()).collect()
}

/// Sends `body` (at `versions`) to the bootstrap broker through a transport of its own and
/// returns the answer; panics on a failure or an answer that is not a Kafka response.
pub async fn ask(
    bootstrap: &str,
    body: RequestKind,
    versions: std::ops::RangeInclusive<i16>,
) -> ResponseKind {
    let (t, _) = transport(bootstrap);
    let request = Request::Raw {
        body: Box::new(body),
        versions,
        fit: None,
    };
    match t
        .send(Target::Bootstrap, request, Duration::from_secs(10))
        .await
    {
        Ok(Response {
            body: ResponseBody::Kafka(r),
            ..
        }) => r,
        other => panic!("{other:?}"),
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
                fit: None,
            },
            Duration::from_secs(20),
        )
        .await
        .expect("CreateTopics answered");
    let ResponseBody::Kafka(ResponseKind::CreateTopics(r)) = r.body else {
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

// ---------------------------------------------------------------------------- members

use std::collections::BTreeSet;
use std::sync::Mutex;

use consumer_membership::config::GroupConfig;
use consumer_membership::driver::{GroupMember, MemberHandle, Snapshot};
use consumer_membership::error::TransportError;
use consumer_membership::machine::TopicPartition;
use consumer_membership::machine::events::Event;

/// A transport that records every request it sends, and how each was answered.
pub struct Recorder<T> {
    inner: T,
    pub sent: Mutex<Vec<(Target, Request)>>,
    /// Each request's API and the version its answer came at (or why none came), in the order
    /// the answers arrived.
    pub answered: Mutex<Vec<(consumer_membership::request::Api, Result<i16, String>)>>,
}

impl<T: Transport> Recorder<T> {
    pub fn new(inner: T) -> Arc<Self> {
        Arc::new(Self {
            inner,
            sent: Mutex::new(Vec::new()),
            answered: Mutex::new(Vec::new()),
        })
    }

    /// How many answers (or failures) of `api` came back so far.
    pub fn answered_count(&self, api: consumer_membership::request::Api) -> usize {
        (self.answered.lock().unwrap().iter())
            .filter(|(a, _)| *a == api)
            .count()
    }

    /// The JoinGroup bodies sent so far.
    pub fn joins(&self) -> Vec<kafka_protocol::messages::JoinGroupRequest> {
        self.sent
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(_, r)| match r {
                Request::Raw { body, .. } => match &**body {
                    RequestKind::JoinGroup(j) => Some(j.clone()),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }
}

impl<T: Transport> Transport for Recorder<T> {
    async fn send(
        &self,
        target: Target,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, TransportError> {
        self.sent
            .lock()
            .unwrap()
            .push((target.clone(), request.clone()));
        let api = request.api_key();
        let r = self.inner.send(target, request, timeout).await;
        let version = r.as_ref().map(|r| r.version).map_err(|e| e.to_string());
        self.answered.lock().unwrap().push((api, version));
        r
    }
}

/// What a test member saw.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    pub owned: BTreeSet<TopicPartition>,
    /// Generations in which the member got an assignment (one per rebalance it took part in).
    pub assigned_generations: Vec<i32>,
    pub revoked: Vec<TopicPartition>,
    pub lost: usize,
    /// Why partitions were lost, one entry per `Event::Lost`.
    pub lost_reasons: Vec<consumer_membership::machine::events::Reason>,
    /// The reason of every state change, in order.
    pub state_reasons: Vec<consumer_membership::machine::events::Reason>,
    pub fatal: Option<consumer_membership::GroupError>,
    pub closed: bool,
    /// (when, owned?, partition): every change of ownership as the application saw it.
    pub ownership_log: Vec<(std::time::Instant, bool, TopicPartition)>,
}

/// A member whose events are handled by a background task: revocations are handed back at once.
pub struct TestMember {
    pub handle: MemberHandle,
    pub seen: Arc<Mutex<Seen>>,
}

/// Fast group timings for tests (the test broker allows a 1 s minimum session).
pub fn group_config(group: &str, instance: Option<&str>) -> GroupConfig {
    let mut c = GroupConfig::new(group);
    c.instance_id = instance.map(String::from);
    c.session_timeout = Duration::from_secs(6);
    c.heartbeat_interval = Duration::from_millis(500);
    c.max_poll_interval = Duration::from_secs(20);
    c.request_timeout = Duration::from_secs(15);
    c
}

/// Logs to the test output when RUST_LOG is set.
pub fn init_tracing() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("RUST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_test_writer()
                .try_init();
        }
    });
}

impl TestMember {
    pub async fn start<T: Transport>(
        transport: Arc<T>,
        config: GroupConfig,
        topics: &[&str],
    ) -> TestMember {
        init_tracing();
        let member = GroupMember::start(transport, config).expect("valid config");
        member
            .subscribe(topics.iter().map(|t| t.to_string()))
            .await
            .expect("subscribe");
        Self::watch(member)
    }

    /// A member subscribed by a broker-side regular expression (consumer protocol).
    pub async fn start_regex<T: Transport>(
        transport: Arc<T>,
        config: GroupConfig,
        pattern: &str,
    ) -> TestMember {
        init_tracing();
        let member = GroupMember::start(transport, config).expect("valid config");
        member
            .subscribe_regex(pattern)
            .await
            .expect("subscribe_regex");
        Self::watch(member)
    }

    /// Handles `member`'s events in a background task.
    fn watch(mut member: GroupMember) -> TestMember {
        let handle = member.handle();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let record = seen.clone();
        tokio::spawn(async move {
            while let Some(event) = member.next_event().await {
                if let Event::Revoking { partitions, ticket } = event {
                    {
                        let mut s = record.lock().unwrap();
                        for p in &partitions {
                            s.owned.remove(p);
                        }
                        let now = std::time::Instant::now();
                        s.ownership_log
                            .extend(partitions.iter().map(|p| (now, false, p.clone())));
                        s.revoked.extend(partitions);
                    }
                    member
                        .complete_revocation(ticket)
                        .await
                        .expect("ticket accepted");
                    continue;
                }
                let mut s = record.lock().unwrap();
                match event {
                    Event::Assigned {
                        owned,
                        generation,
                        added,
                    } => {
                        let now = std::time::Instant::now();
                        s.ownership_log
                            .extend(added.iter().map(|p| (now, true, p.clone())));
                        s.owned = owned.into_iter().collect();
                        s.assigned_generations.push(generation);
                    }
                    Event::Revoked { partitions } => {
                        let now = std::time::Instant::now();
                        s.ownership_log
                            .extend(partitions.iter().map(|p| (now, false, p.clone())));
                        for p in &partitions {
                            s.owned.remove(p);
                        }
                    }
                    Event::Lost { partitions, reason } => {
                        s.lost_reasons.push(reason);
                        let now = std::time::Instant::now();
                        s.ownership_log
                            .extend(partitions.iter().map(|p| (now, false, p.clone())));
                        s.owned.clear();
                        s.lost += 1;
                    }
                    Event::StateChanged { reason, .. } => s.state_reasons.push(reason),
                    Event::Fatal(e) => s.fatal = Some(e),
                    Event::Closed => s.closed = true,
                    _ => {}
                }
            }
        });
        TestMember { handle, seen }
    }

    pub fn seen(&self) -> Seen {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until what the application saw satisfies `pred` (events arrive asynchronously).
    pub async fn wait_seen(&self, timeout: Duration, pred: impl Fn(&Seen) -> bool) -> Seen {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let s = self.seen();
            if pred(&s) {
                return s;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "not seen within {timeout:?}: {s:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn snapshot(&self) -> Snapshot {
        self.handle.snapshot().await.expect("member task alive")
    }

    /// Waits until the member is Stable (and, if given, owns `count` partitions).
    pub async fn wait_stable(&self, count: Option<usize>, timeout: Duration) -> Snapshot {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let s = self.snapshot().await;
            if s.state == MemberState::Stable && count.is_none_or(|c| s.assignment.len() == c) {
                return s;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "not stable within {timeout:?}: {s:?} {:?}",
                self.seen()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Waits until `members` are all Stable with disjoint assignments covering `total` partitions.
pub async fn wait_balanced(
    members: &[&TestMember],
    total: usize,
    timeout: Duration,
) -> Vec<Snapshot> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let mut snaps = Vec::new();
        for m in members {
            snaps.push(m.snapshot().await);
        }
        let all: Vec<&TopicPartition> = snaps.iter().flat_map(|s| s.assignment.iter()).collect();
        let distinct: BTreeSet<&TopicPartition> = all.iter().copied().collect();
        // Classic members of one generation agree on it; KIP-848 member epochs may differ.
        let same_generation = snaps.windows(2).all(|w| {
            w[0].generation == w[1].generation || w[0].protocol == GroupProtocol::Consumer
        });
        if snaps.iter().all(|s| s.state == MemberState::Stable)
            && same_generation
            && all.len() == total
            && distinct.len() == total
        {
            return snaps;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not balanced within {timeout:?}: {snaps:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
pub mod java_peer;
pub mod jvm;
pub mod ownership;
pub mod proxy;
pub mod share_peer;
pub mod streams_peer;

/// The binary of example `name` next to the running test's (`cargo test` builds examples),
/// built here when missing or older than its source (e.g. under `cargo test --test <one>`).
pub fn example_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let bin = profile_dir.join("examples").join(name);
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(format!("{name}.rs"));
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if modified(&bin) < modified(&source) {
        let features: Vec<&str> = [
            ("tokio", cfg!(feature = "tokio")),
            ("tls", cfg!(feature = "tls")),
            ("sim", cfg!(feature = "sim")),
        ]
        .into_iter()
        .filter_map(|(f, on)| on.then_some(f))
        .collect();
        let mut build = Command::new(env!("CARGO"));
        build
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["build", "--example", name, "--no-default-features"])
            .args(["--features", &features.join(",")]);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let status = build
            .status()
            .unwrap_or_else(|e| panic!("run cargo build --example {name}: {e}"));
        assert!(status.success(), "cargo build --example {name} failed");
    }
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build --all-features --example {name}`",
        bin.display()
    );
    bin
}

/// Sets group configs of `group` (IncrementalAlterConfigs SET on the GROUP resource, type 32,
/// KIP-848's group configs), e.g. `consumer.session.timeout.ms` within the broker's
/// `group.consumer.min/max.session.timeout.ms`. The broker takes them before the group exists.
/// Panics with the broker's error.
pub async fn set_group_configs(bootstrap: &str, group: &str, configs: &[(&str, &str)]) {
    use kafka_protocol::messages::IncrementalAlterConfigsRequest;
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    let (t, _) = transport(bootstrap);
    let resource = AlterConfigsResource::default()
        .with_resource_type(32)
        .with_resource_name(StrBytes::from_string(group.to_owned()))
        .with_configs(
            configs
                .iter()
                .map(|(k, v)| {
                    AlterableConfig::default()
                        .with_name(StrBytes::from_string(k.to_string()))
                        .with_config_operation(0)
                        .with_value(Some(StrBytes::from_string(v.to_string())))
                })
                .collect(),
        );
    let body = IncrementalAlterConfigsRequest::default().with_resources(vec![resource]);
    let r = t
        .send(
            Target::Bootstrap,
            Request::Raw {
                body: Box::new(RequestKind::IncrementalAlterConfigs(body)),
                versions: 0..=1,
                fit: None,
            },
            Duration::from_secs(30),
        )
        .await
        .expect("IncrementalAlterConfigs sent");
    let ResponseBody::Kafka(ResponseKind::IncrementalAlterConfigs(r)) = r.body else {
        panic!("not an IncrementalAlterConfigs answer: {r:?}");
    };
    for res in r.responses {
        assert_eq!(
            res.error_code, 0,
            "setting {configs:?} on group {group}: {:?}",
            res.error_message
        );
    }
}

/// Variables Cargo sets for the crates it builds and runs (besides `CARGO_PKG_*` and
/// `CARGO_BIN_EXE_*`).
const CARGO_SET: &[&str] = &[
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_MANIFEST_LINKS",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "CARGO_RUSTC_CURRENT_DIR",
    "CARGO_SBOM_PATH",
    "OUT_DIR",
];

/// The lines a child writes to `stdout` that parse as JSON, each with the instant it was read,
/// gathered by a thread until the pipe closes.
pub type JsonLines = Arc<Mutex<Vec<(std::time::Instant, serde_json::Value)>>>;

pub fn json_lines(stdout: std::process::ChildStdout) -> JsonLines {
    use std::io::BufRead;
    let lines = JsonLines::default();
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if let Ok(v) = serde_json::from_str(&line) {
                sink.lock().unwrap().push((std::time::Instant::now(), v));
            }
        }
    });
    lines
}

/// The JSON lines whose `event` field is `event`, in the order they were read.
pub fn json_events(lines: &JsonLines, event: &str) -> Vec<serde_json::Value> {
    (lines.lock().unwrap().iter())
        .filter(|(_, v)| v["event"] == event)
        .map(|(_, v)| v.clone())
        .collect()
}

/// Builds `examples/<name>.rs` with cargo and returns its executable.
pub fn build_example(name: &str) -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let mut cmd = Command::new(env!("CARGO"));
    // Not the variables Cargo set for this test: build scripts that watch one (ring
    // watches CARGO_MANIFEST_DIR) would be rerun, and the next `cargo test` would
    // rebuild everything after them again.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if CARGO_SET.iter().any(|k| key == *k)
            || ["CARGO_PKG_", "CARGO_BIN_EXE_"]
                .iter()
                .any(|p| key.starts_with(p))
        {
            cmd.env_remove(&*key);
        }
    }
    cmd.args(["build", "--example", name])
        .args(["--message-format", "json-render-diagnostics"])
        .arg("--manifest-path")
        .arg(&manifest);
    // Same profile as this test binary (target/<profile>/deps/<test>).
    let exe = std::env::current_exe().expect("current exe");
    if exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .is_some_and(|p| p == "release")
    {
        cmd.arg("--release");
    }
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .expect("run cargo build --example");
    assert!(out.status.success(), "cargo build --example {name} failed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let text = |m: &serde_json::Value, key: &str| m.get(key)?.as_str().map(str::to_owned);
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| text(m, "reason").as_deref() == Some("compiler-artifact"))
        .filter(|m| (m.get("target")).and_then(|t| text(t, "name")).as_deref() == Some(name))
        .find_map(|m| text(&m, "executable").map(PathBuf::from))
        .expect("cargo reported the example's executable")
}

/// The member ids ShareGroupDescribe lists for `group`, and each one's assigned partitions.
pub async fn share_group_members(
    bootstrap: &str,
    group: &str,
) -> Vec<(String, std::collections::BTreeSet<i32>)> {
    use kafka_protocol::messages::{GroupId, ShareGroupDescribeRequest};
    let body = RequestKind::ShareGroupDescribe(
        ShareGroupDescribeRequest::default()
            .with_group_ids(vec![GroupId(StrBytes::from_string(group.into()))]),
    );
    let ResponseKind::ShareGroupDescribe(r) = ask(bootstrap, body, 1..=1).await else {
        panic!("not a ShareGroupDescribe answer")
    };
    let g = &r.groups[0];
    assert_eq!(g.error_code, 0, "{:?}", g.error_message);
    let mut members: Vec<(String, std::collections::BTreeSet<i32>)> = (g.members.iter())
        .map(|m| {
            let partitions = (m.assignment.topic_partitions.iter())
                .flat_map(|t| t.partitions.iter().copied())
                .collect();
            (m.member_id.to_string(), partitions)
        })
        .collect();
    members.sort();
    members
}
