//! Version-sensitive behaviours, against whatever broker `KAFKA_BOOTSTRAP` points at: any
//! release of the compatibility matrix (`tests/kafka/matrix.sh`; `broker.sh versions`).
//!
//! The broker's release comes from `KAFKA_VERSION` (exported by `tests/kafka/with-broker.sh`),
//! else it is inferred from its ApiVersions answer (ConsumerGroupHeartbeat absent: a 3.6-like
//! broker, v0 only: the 3.7-3.9 preview, v1: 4.x). Each test asserts what that release should
//! answer and reports one row of the matrix table: a line `compat | <title> | <what happened>`
//! on stdout and, with `COMPAT_REPORT=<file>`, tab-separated lines appended to that file
//! (`S <order> <test> <title>` when the test starts, `C <test> <cell>` when it has its result).
//! Rows with Java members run Kafka's own VerifiableConsumer of the same release
//! (tests/common/java_peer.rs; jars from `tests/kafka/peer.sh libs`, which reads
//! `KAFKA_VERSION` too).
//!
//! ```sh
//! KAFKA_VERSION=3.6.2 tests/kafka/with-broker.sh cargo test --test compat
//! tests/kafka/matrix.sh        # every release, table in bench/results/compat.md
//! ```

mod common;
#[path = "../examples/common/fetch.rs"]
mod fetch;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::java_peer::{self, JavaConsumer, PeerEvent};
use common::{TestMember, unique, wait_balanced};
use consumer_membership::config::{GroupConfig, GroupProtocol};
use consumer_membership::driver::Snapshot;
use consumer_membership::error::error_name;
use consumer_membership::machine::TopicPartition;
use consumer_membership::machine::events::MemberState;
use consumer_membership::machine::events::{CloseOptions, CommitError, CommitOffset};
use consumer_membership::request::{Request, Response, ResponseBody, Target};
use consumer_membership::transport::{TcpTransport, Transport};
use consumer_membership::{GroupError, MemberId, TransportError, driver};
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions as HeartbeatPartitions;
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, GroupId, RequestKind,
    ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;

const T: Duration = Duration::from_secs(30);

// ------------------------------------------------------------------------------ the broker

/// The broker's release line (and patch release when `KAFKA_VERSION` names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Release {
    major: u32,
    minor: u32,
    patch: Option<u32>,
}

impl Release {
    const fn line(major: u32, minor: u32) -> Release {
        Release {
            major,
            minor,
            patch: None,
        }
    }

    fn at_least(self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }

    /// ConsumerGroupHeartbeat versions a broker of this line advertises with the harness's
    /// settings: none before 3.7 (an unstable API, not advertised), v0 in the 3.7-3.9
    /// preview (`group.coordinator.rebalance.protocols=classic,consumer`), v0-v1 from 4.0
    /// (v1: KIP-1082, client-generated member ids).
    fn heartbeat_versions(self) -> Option<RangeInclusive<i16>> {
        if !self.at_least(3, 7) {
            None
        } else if !self.at_least(4, 0) {
            Some(0..=0)
        } else {
            Some(0..=1)
        }
    }

    /// Whether the broker takes an epoch-0 heartbeat from a member id it still has registered
    /// at a later epoch as a rejoin (KAFKA-19233, from 4.2 in this matrix). 4.0 and 4.1 answer
    /// FENCED_MEMBER_EPOCH until the member's session expires. `None`: unknown (a 4.x release
    /// inferred from ApiVersions).
    fn epoch_zero_rejoin_accepted(self) -> Option<bool> {
        if self.patch.is_none() && self == Release::line(4, 0) {
            return None;
        }
        Some(self.at_least(4, 2))
    }

    /// Whether this crate's KIP-848 member (ConsumerGroupHeartbeat v1 only) can run here.
    fn consumer_protocol(self) -> bool {
        self.at_least(4, 0)
    }
}

impl std::fmt::Display for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.patch {
            Some(p) => write!(f, "{}.{}.{p}", self.major, self.minor),
            None => write!(f, "{}.{}", self.major, self.minor),
        }
    }
}

fn parse_release(v: &str) -> Option<Release> {
    let mut it = v.trim().split('.').map(|p| p.parse::<u32>().ok());
    let (major, minor) = (it.next()??, it.next()??);
    Some(Release {
        major,
        minor,
        patch: it.next().flatten(),
    })
}

struct Broker {
    bootstrap: String,
    release: Release,
    /// How the release was learned ("KAFKA_VERSION" or "ApiVersions").
    source: &'static str,
    /// What the broker serves, from its ApiVersions answer.
    versions: consumer_membership::transport::wire::BrokerVersions,
}

impl Broker {
    /// The broker under test, or `None` (test skipped) without `KAFKA_BOOTSTRAP`.
    async fn get() -> Option<Broker> {
        let bootstrap = common::bootstrap()?;
        let (t, _) = common::transport(&bootstrap);
        let versions = t
            .broker_versions(&Target::Bootstrap)
            .await
            .expect("connect + ApiVersions");
        let from_env = std::env::var("KAFKA_VERSION")
            .ok()
            .filter(|v| !v.trim().is_empty());
        let (release, source) = match from_env {
            Some(v) => (
                parse_release(&v).unwrap_or_else(|| panic!("KAFKA_VERSION={v} is not X.Y[.Z]")),
                "KAFKA_VERSION",
            ),
            None => (
                match versions.get(ApiKey::ConsumerGroupHeartbeat) {
                    None => Release::line(3, 6),
                    Some(r) if *r.end() == 0 => Release::line(3, 9),
                    Some(_) => Release::line(4, 0),
                },
                "ApiVersions",
            ),
        };
        Some(Broker {
            bootstrap,
            release,
            source,
            versions,
        })
    }

    fn transport(&self) -> Arc<TcpTransport> {
        common::transport(&self.bootstrap).0
    }

    async fn topic(&self, prefix: &str, partitions: i32) -> String {
        let name = unique(prefix);
        common::create_topic(&*self.transport(), &name, partitions).await;
        name
    }

    /// `n/a` cell for a consumer-protocol row on a broker this crate's KIP-848 member cannot
    /// use; `None` where it can.
    fn no_consumer_protocol(&self) -> Option<String> {
        if self.release.consumer_protocol() {
            return None;
        }
        Some(match self.versions.get(ApiKey::ConsumerGroupHeartbeat) {
            None => "n/a: no ConsumerGroupHeartbeat".into(),
            Some(r) => format!(
                "n/a: ConsumerGroupHeartbeat v{}-v{} only (this crate needs v1)",
                r.start(),
                r.end()
            ),
        })
    }
}

// ------------------------------------------------------------------------------ the report

/// One row of the matrix table, reported by one test.
struct Row {
    test: &'static str,
    title: &'static str,
}

impl Row {
    fn start(order: u32, test: &'static str, title: &'static str) -> Row {
        append_report(&format!("S\t{order}\t{test}\t{title}"));
        Row { test, title }
    }

    /// The cell: what the broker answered and what the member did.
    fn cell(&self, text: impl AsRef<str>) {
        let text = text.as_ref().replace(['\t', '\n', '|'], " ");
        println!("compat | {} | {text}", self.title);
        append_report(&format!("C\t{}\t{text}", self.test));
    }
}

fn append_report(line: &str) {
    let Some(path) = std::env::var_os("COMPAT_REPORT") else {
        return;
    };
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open COMPAT_REPORT");
    // One write per line: appends of a few hundred bytes do not interleave.
    f.write_all(format!("{line}\n").as_bytes())
        .expect("write COMPAT_REPORT");
}

fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

fn code(c: i16) -> String {
    error_name(c)
}

// ------------------------------------------------------------------------------ transports

/// A group-API exchange as seen on the wire.
#[derive(Debug, Clone)]
struct Exchange {
    at: Instant,
    request: RequestKind,
    answer: Result<ResponseKind, String>,
}

/// A TCP transport that records group-API exchanges, and can lose the answer to the first
/// ConsumerGroupHeartbeat (the request reaches the broker; the client sees a disconnect) or
/// make the next regular heartbeat carry a wrong epoch (the broker fences the member while
/// it is still registered).
struct Wire {
    inner: TcpTransport,
    lose_first_heartbeat_answer: AtomicBool,
    poison_next_heartbeat: AtomicBool,
    log: Mutex<Vec<Exchange>>,
}

impl Wire {
    fn new(b: &Broker) -> Arc<Wire> {
        let (_, c) = common::transport(&b.bootstrap);
        Arc::new(Wire {
            inner: TcpTransport::new(c),
            lose_first_heartbeat_answer: AtomicBool::new(false),
            poison_next_heartbeat: AtomicBool::new(false),
            log: Mutex::new(Vec::new()),
        })
    }

    fn exchanges(&self) -> Vec<Exchange> {
        self.log.lock().unwrap().clone()
    }

    /// ConsumerGroupHeartbeat (request, answer) pairs, in order.
    fn heartbeats(
        &self,
    ) -> Vec<(
        Instant,
        ConsumerGroupHeartbeatRequest,
        Result<ConsumerGroupHeartbeatResponse, String>,
    )> {
        self.exchanges()
            .into_iter()
            .filter_map(|e| match e.request {
                RequestKind::ConsumerGroupHeartbeat(h) => Some((
                    e.at,
                    h,
                    e.answer.and_then(|a| match a {
                        ResponseKind::ConsumerGroupHeartbeat(r) => Ok(r),
                        other => Err(format!("{other:?}")),
                    }),
                )),
                _ => None,
            })
            .collect()
    }
}

impl Transport for Wire {
    async fn send(
        &self,
        target: Target,
        mut request: Request,
        timeout: Duration,
    ) -> Result<Response, TransportError> {
        let mut heartbeat = false;
        if let Request::Raw { body, .. } = &mut request
            && let RequestKind::ConsumerGroupHeartbeat(h) = &mut **body
        {
            heartbeat = true;
            if h.member_epoch > 0 && self.poison_next_heartbeat.swap(false, Ordering::SeqCst) {
                h.member_epoch += 7;
            }
        }
        let recorded = match &request {
            Request::Raw { body, .. } => Some((**body).clone()),
            _ => None,
        };
        let mut r = self.inner.send(target, request, timeout).await;
        if heartbeat
            && self
                .lose_first_heartbeat_answer
                .swap(false, Ordering::SeqCst)
        {
            r = Err(TransportError::Disconnected {
                addr: "test".into(),
                reason: "answer lost".into(),
            });
        }
        if let Some(request) = recorded {
            self.log.lock().unwrap().push(Exchange {
                at: Instant::now(),
                request,
                answer: r
                    .as_ref()
                    .map(|r| {
                        r.body
                            .clone()
                            .into_kafka()
                            .expect("a kafka-protocol answer")
                    })
                    .map_err(|e| e.to_string()),
            });
        }
        r
    }
}

// ------------------------------------------------------------------------------ helpers

fn classic(group: &str, instance: Option<&str>) -> GroupConfig {
    common::group_config(group, instance)
}

fn consumer(group: &str, instance: Option<&str>) -> GroupConfig {
    let mut c = common::group_config(group, instance);
    c.protocol = GroupProtocol::Consumer;
    c
}

/// Produces `per_partition` records `key-p-i` / `value-p-i` to each partition of `topic`;
/// leadership may still be settling right after CreateTopics, so such errors are retried.
async fn produce(b: &Broker, topic: &str, partitions: i32, per_partition: usize) {
    let (t, config) = common::transport(&b.bootstrap);
    let deadline = Instant::now() + Duration::from_secs(20);
    for p in 0..partitions {
        let tp = TopicPartition::new(topic, p);
        let records: Vec<(Option<Bytes>, Option<Bytes>)> = (0..per_partition)
            .map(|i| {
                (
                    Some(Bytes::from(format!("key-{p}-{i}"))),
                    Some(Bytes::from(format!("value-{p}-{i}"))),
                )
            })
            .collect();
        fetch::produce_settling(&*t, &tp, &records, config.request_timeout, deadline)
            .await
            .unwrap_or_else(|e| panic!("produce to {tp}: {e}"));
    }
}

/// Fetches `partitions` from offset 0 until each has `per_partition` records; returns the
/// values read and the next offset of each partition.
async fn consume(
    b: &Broker,
    partitions: &[TopicPartition],
    per_partition: usize,
) -> (Vec<String>, BTreeMap<TopicPartition, i64>) {
    let (t, config) = common::transport(&b.bootstrap);
    let mut values = Vec::new();
    let mut next = BTreeMap::new();
    let deadline = Instant::now() + T;
    for tp in partitions {
        let mut offset = 0;
        let mut got = 0;
        while got < per_partition {
            assert!(
                Instant::now() < deadline,
                "{tp}: {got} of {per_partition} records"
            );
            let leaders = fetch::leaders(&*t, &[tp.topic.to_string()], config.request_timeout)
                .await
                .expect("metadata");
            let leader = leaders.leader(tp).expect("leader").clone();
            let answer = fetch::fetch(
                &*t,
                &leader,
                &[(tp.clone(), offset)],
                &fetch::FetchOptions::default(),
            )
            .await
            .expect("fetch");
            let fetched = answer[tp].clone().expect("partition fetched");
            for r in &fetched.records {
                values.push(String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into());
                got += 1;
            }
            if let Some(n) = fetched.next_offset {
                offset = n;
            }
        }
        next.insert(tp.clone(), offset);
    }
    (values, next)
}

async fn wait_fatal(m: &TestMember, timeout: Duration) -> GroupError {
    m.wait_seen(timeout, |s| s.fatal.is_some())
        .await
        .fatal
        .unwrap()
}

/// One raw ConsumerGroupHeartbeat (v1) to the coordinator (the single test node). An epoch-0
/// heartbeat subscribes to `topics` and owns nothing; others send `topics` and `owned` when
/// given.
async fn raw_heartbeat(
    t: &TcpTransport,
    group: &str,
    member_id: &str,
    epoch: i32,
    instance: Option<&str>,
    topics: &[&str],
    owned: Option<Vec<HeartbeatPartitions>>,
) -> ConsumerGroupHeartbeatResponse {
    let names = || {
        Some(
            topics
                .iter()
                .map(|t| TopicName(StrBytes::from_string((*t).into())))
                .collect(),
        )
    };
    let mut h = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.into())))
        .with_member_id(StrBytes::from_string(member_id.into()))
        .with_member_epoch(epoch)
        .with_instance_id(instance.map(|i| StrBytes::from_string(i.into())));
    if epoch == 0 {
        h = h
            .with_rebalance_timeout_ms(10_000)
            .with_subscribed_topic_names(names())
            .with_topic_partitions(Some(Vec::new()));
    } else if epoch > 0 {
        h = h
            .with_subscribed_topic_names(names().filter(|_| !topics.is_empty()))
            .with_topic_partitions(owned);
    }
    let r = t
        .send(
            Target::Bootstrap,
            Request::Raw {
                body: Box::new(RequestKind::ConsumerGroupHeartbeat(h)),
                versions: 1..=1,
                fit: None,
            },
            Duration::from_secs(10),
        )
        .await
        .expect("ConsumerGroupHeartbeat answered");
    let ResponseBody::Kafka(ResponseKind::ConsumerGroupHeartbeat(r)) = r.body else {
        panic!("not a ConsumerGroupHeartbeat answer")
    };
    r
}

/// The partitions an answer assigned, as a heartbeat's owned partitions.
fn owned_of(r: &ConsumerGroupHeartbeatResponse) -> Option<Vec<HeartbeatPartitions>> {
    r.assignment.as_ref().map(|a| {
        a.topic_partitions
            .iter()
            .map(|tp| {
                HeartbeatPartitions::default()
                    .with_topic_id(tp.topic_id)
                    .with_partitions(tp.partitions.clone())
            })
            .collect()
    })
}

fn answer(r: &ConsumerGroupHeartbeatResponse) -> String {
    if r.error_code == 0 {
        format!("NONE epoch {}", r.member_epoch)
    } else {
        code(r.error_code)
    }
}

// ------------------------------------------------------------------------------ the rows

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r01_broker_api_versions_and_find_coordinator() {
    let Some(b) = Broker::get().await else { return };
    let row = Row::start(
        1,
        "r01_broker_api_versions_and_find_coordinator",
        "broker: ApiVersions (ConsumerGroupHeartbeat), FindCoordinator",
    );
    let (t, config) = common::transport(&b.bootstrap);
    let cgh = b.versions.get(ApiKey::ConsumerGroupHeartbeat);
    assert_eq!(
        cgh,
        b.release.heartbeat_versions(),
        "Kafka {} ({})",
        b.release,
        b.source
    );
    // The classic member's ranges (core/src/machine/classic/member.rs) all have a common version.
    let mut negotiated = Vec::new();
    for (api, ours) in [
        (ApiKey::JoinGroup, 5..=9),
        (ApiKey::SyncGroup, 3..=5),
        (ApiKey::Heartbeat, 3..=4),
        (ApiKey::LeaveGroup, 3..=5),
        (ApiKey::OffsetCommit, 7..=9),
        (ApiKey::OffsetFetch, 8..=9),
    ] {
        let v = b
            .versions
            .negotiate(api, ours)
            .unwrap_or_else(|e| panic!("{e}"));
        negotiated.push(format!("{api:?} v{v}"));
    }
    let group = unique("fc");
    let started = Instant::now();
    let coordinator = driver::find_coordinator(&t, &config, &group)
        .await
        .expect("coordinator");
    let took = started.elapsed();
    assert_eq!(coordinator.node_id, 1);
    row.cell(format!(
        "{}; {}; FindCoordinator: node {} in {}",
        match cgh {
            None => "ConsumerGroupHeartbeat not advertised".to_string(),
            Some(r) => format!("ConsumerGroupHeartbeat v{}-v{}", r.start(), r.end()),
        },
        negotiated.join(", "),
        coordinator.node_id,
        ms(took)
    ));
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r02_auto_protocol_follows_the_broker_and_consumes() {
    let Some(b) = Broker::get().await else { return };
    let row = Row::start(
        2,
        "r02_auto_protocol_follows_the_broker_and_consumes",
        "group.protocol=auto: protocol chosen, records consumed",
    );
    const PER: usize = 10;
    let topic = b.topic("auto", 3).await;
    produce(&b, &topic, 3, PER).await;
    let group = unique("auto");
    let wire = Wire::new(&b);
    let mut c = classic(&group, None);
    c.protocol = GroupProtocol::Auto;
    let started = Instant::now();
    let m = TestMember::start(wire.clone(), c, &[&topic]).await;
    let s = m.wait_stable(Some(3), T).await;
    let took = started.elapsed();
    let want = if b.release.consumer_protocol() {
        GroupProtocol::Consumer
    } else {
        GroupProtocol::Classic
    };
    assert_eq!(s.protocol, want, "Kafka {}", b.release);
    assert!(m.seen().fatal.is_none(), "{:?}", m.seen().fatal);
    // What the broker answered to the first ConsumerGroupHeartbeat.
    let first = match wire.heartbeats().first() {
        None => "no heartbeat sent".to_string(),
        Some((_, _, Ok(r))) => format!("heartbeat {}", answer(r)),
        Some((_, _, Err(e))) if e.contains("no common version") => {
            "no common ConsumerGroupHeartbeat version, none sent".to_string()
        }
        Some((_, _, Err(e))) => format!("heartbeat failed: {e}"),
    };
    let joins = wire
        .exchanges()
        .iter()
        .filter(|e| matches!(e.request, RequestKind::JoinGroup(_)))
        .count();
    if want == GroupProtocol::Classic {
        assert!(joins > 0, "fell back without a JoinGroup");
    } else {
        assert_eq!(joins, 0, "a consumer-protocol member sent JoinGroup");
    }
    // Consume what was produced, from the partitions the member got, and commit it.
    let (values, next) = consume(&b, &s.assignment, PER).await;
    assert_eq!(values.len(), 3 * PER);
    let distinct: BTreeSet<&String> = values.iter().collect();
    assert_eq!(distinct.len(), 3 * PER, "every record once");
    let offsets: Vec<CommitOffset> = next
        .iter()
        .map(|(tp, o)| CommitOffset {
            partition: tp.clone(),
            offset: *o,
            metadata: None,
        })
        .collect();
    m.handle.commit(offsets).await.expect("commit");
    let committed = m
        .handle
        .committed(next.keys().cloned().collect())
        .await
        .expect("committed");
    for (tp, o) in &next {
        assert_eq!(committed[tp].offset, Some(*o), "{tp}");
    }
    m.handle.close(CloseOptions::Default).await;
    row.cell(format!(
        "{} ({first}); Stable with 3 partitions in {}; consumed {}/{} records, committed",
        if want == GroupProtocol::Classic {
            "falls back to classic"
        } else {
            "stays on consumer"
        },
        ms(took),
        values.len(),
        3 * PER
    ));
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r03_consumer_protocol_join() {
    let Some(b) = Broker::get().await else { return };
    let row = Row::start(
        3,
        "r03_consumer_protocol_join",
        "group.protocol=consumer: join (or typed refusal)",
    );
    let topic = b.topic("join848", 3).await;
    let group = unique("join848");
    let wire = Wire::new(&b);
    let started = Instant::now();
    let m = TestMember::start(wire.clone(), consumer(&group, None), &[&topic]).await;
    if !b.release.consumer_protocol() {
        let e = wait_fatal(&m, T).await;
        assert_eq!(e, GroupError::ConsumerProtocolUnsupported);
        // Refused in the client by the broker's ApiVersions: nothing went on the wire.
        assert!(
            wire.heartbeats()
                .iter()
                .all(|(_, _, r)| r.as_ref().is_err_and(|e| e.contains("no common version"))),
            "{:?}",
            wire.heartbeats()
        );
        row.cell(format!(
            "{}: Fatal(ConsumerProtocolUnsupported) after {}, no request on the wire",
            b.no_consumer_protocol().unwrap(),
            ms(started.elapsed())
        ));
        return;
    }
    let s = m.wait_stable(Some(3), T).await;
    let took = started.elapsed();
    assert_eq!(s.protocol, GroupProtocol::Consumer);
    let hb = wire.heartbeats();
    let (_, first, answer0) = hb.first().expect("a heartbeat");
    assert_eq!(
        (first.member_epoch, first.member_id.as_str()),
        (0, &*s.member_id)
    );
    let answer0 = answer0.as_ref().expect("answered");
    assert_eq!(answer0.error_code, 0);
    assert_eq!(
        common::described_members(&b.bootstrap, &group).await,
        vec![s.member_id.clone()]
    );
    m.handle.close(CloseOptions::Default).await;
    row.cell(format!(
        "first heartbeat (client id, epoch 0) -> NONE epoch {}; Stable with 3 partitions (epoch {}) in {}, {} heartbeats",
        answer0.member_epoch,
        s.generation,
        ms(took),
        hb.len()
    ));
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r04_classic_static_leader_restart_without_rebalance() {
    let Some(b) = Broker::get().await else { return };
    let row = Row::start(
        4,
        "r04_classic_static_leader_restart_without_rebalance",
        "classic: static leader restart, no rebalance (KIP-345, KIP-814)",
    );
    let topic = b.topic("static", 4).await;
    let group = unique("static");
    let a = TestMember::start(b.transport(), classic(&group, Some("a")), &[&topic]).await;
    a.wait_stable(None, T).await;
    let z = TestMember::start(b.transport(), classic(&group, Some("z")), &[&topic]).await;
    let snaps = wait_balanced(&[&a, &z], 4, T).await;
    let (leader, other, instance) = if snaps[0].leader {
        (a, z, "a")
    } else {
        (z, a, "z")
    };
    let before = leader.snapshot().await;
    assert!(before.leader);
    let other_before = other.snapshot().await;
    let other_seen = other.seen();
    leader.handle.close(CloseOptions::Default).await; // static: no LeaveGroup
    let wire = Wire::new(&b);
    let started = Instant::now();
    let back = TestMember::start(wire.clone(), classic(&group, Some(instance)), &[&topic]).await;
    let again = back.wait_stable(Some(before.assignment.len()), T).await;
    let took = started.elapsed();
    assert_eq!(again.assignment, before.assignment);
    assert_eq!(again.generation, before.generation, "no new generation");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let other_after = other.snapshot().await;
    assert_eq!(
        (other_after.generation, &other_after.assignment),
        (other_before.generation, &other_before.assignment)
    );
    assert_eq!(
        other.seen().assigned_generations,
        other_seen.assigned_generations,
        "the other member saw no rebalance"
    );
    assert!(back.seen().fatal.is_none() && other.seen().fatal.is_none());
    // KIP-814: the broker names the restarted static leader as leader but skips the
    // assignment (JoinGroup v9), so it does not run the assignor again.
    let join = wire
        .exchanges()
        .into_iter()
        .find_map(|e| match e.answer {
            Ok(ResponseKind::JoinGroup(j)) if j.error_code == 0 => Some(j),
            _ => None,
        })
        .expect("an answered JoinGroup");
    assert!(join.skip_assignment, "KIP-814 SkipAssignment");
    assert_eq!(join.leader, join.member_id, "still the leader");
    row.cell(format!(
        "JoinGroup -> leader, skipAssignment={}, generation {} (unchanged); same {} partitions back in {}; other member: no rebalance",
        join.skip_assignment,
        join.generation_id,
        again.assignment.len(),
        ms(took)
    ));
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r05_classic_suppressed_leave_rejoins_with_the_kept_member_id() {
    let Some(b) = Broker::get().await else { return };
    let row = Row::start(
        5,
        "r05_classic_suppressed_leave_rejoins_with_the_kept_member_id",
        "classic: suppressed leave, rejoin with the kept member id (KAFKA-20985)",
    );
    let topic = b.topic("suppressed", 2).await;
    let group = unique("suppressed");
    let wire = Wire::new(&b);
    let m = TestMember::start(wire.clone(), classic(&group, Some("s1")), &[&topic]).await;
    let first = m.wait_stable(Some(2), T).await;
    let joins_before = wire
        .exchanges()
        .iter()
        .filter(|e| matches!(e.request, RequestKind::JoinGroup(_)))
        .count();
    m.handle.unsubscribe().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(m.snapshot().await.member_id, first.member_id, "kept");
    let started = Instant::now();
    m.handle.subscribe([topic.clone()]).await.unwrap();
    let again = m.wait_stable(Some(2), T).await;
    let took = started.elapsed();
    let ex = wire.exchanges();
    let rejoin: Vec<_> = ex
        .iter()
        .filter_map(|e| match (&e.request, &e.answer) {
            (RequestKind::JoinGroup(j), Ok(ResponseKind::JoinGroup(r))) => Some((j, r)),
            _ => None,
        })
        .skip(joins_before)
        .collect();
    let (req, resp) = rejoin.first().expect("a JoinGroup after resubscribing");
    assert_eq!(
        req.member_id.as_str(),
        first.member_id,
        "carries the kept id"
    );
    assert_eq!(resp.error_code, 0, "{}", code(resp.error_code));
    assert_eq!(again.member_id, first.member_id);
    let leaves = ex
        .iter()
        .filter(|e| matches!(e.request, RequestKind::LeaveGroup(_)))
        .count();
    assert_eq!(leaves, 0, "no LeaveGroup from a static member");
    assert!(m.seen().fatal.is_none(), "{:?}", m.seen().fatal);
    row.cell(format!(
        "JoinGroup(kept id) -> {} (same member id), generation {} -> {}; Stable again in {}; no LeaveGroup, no fencing",
        code(resp.error_code),
        first.generation,
        again.generation,
        ms(took)
    ));
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r06_classic_duplicate_instance_id_is_fenced() {
    let Some(b) = Broker::get().await else { return };
    let row = Row::start(
        6,
        "r06_classic_duplicate_instance_id_is_fenced",
        "classic: duplicate instance id, the older process fenced",
    );
    let topic = b.topic("dup", 3).await;
    let group = unique("dup");
    let mut slow = classic(&group, Some("same"));
    // A long heartbeat interval lets the first process commit before a heartbeat tells it.
    slow.session_timeout = Duration::from_secs(10);
    slow.heartbeat_interval = Duration::from_secs(9);
    let first = TestMember::start(b.transport(), slow, &[&topic]).await;
    first.wait_stable(Some(3), T).await;
    let started = Instant::now();
    let second = TestMember::start(b.transport(), classic(&group, Some("same")), &[&topic]).await;
    second.wait_stable(Some(3), T).await;
    let took = started.elapsed();
    let r = first
        .handle
        .commit(vec![CommitOffset {
            partition: TopicPartition::new(&topic, 0),
            offset: 1,
            metadata: None,
        }])
        .await;
    let commit = match &r {
        Err(CommitError::FencedInstanceId { instance_id }) => {
            assert_eq!(instance_id, "same");
            "FENCED_INSTANCE_ID".to_string()
        }
        Err(CommitError::Fatal(GroupError::FencedInstanceId { .. })) => {
            "FENCED_INSTANCE_ID (member already stopped)".to_string()
        }
        other => panic!("commit from the fenced process: {other:?}"),
    };
    let e = wait_fatal(&first, T).await;
    assert!(
        matches!(&e, GroupError::FencedInstanceId { instance_id, .. } if instance_id == "same"),
        "{e:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let s = second.snapshot().await;
    assert_eq!((s.state, s.assignment.len()), (MemberState::Stable, 3));
    assert!(second.seen().fatal.is_none());
    row.cell(format!(
        "new process Stable with the partitions in {}; old process: commit -> {commit}, then Fatal(FencedInstanceId); new one not fenced",
        ms(took)
    ));
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r07_consumer_static_leave_and_rejoin() {
    let Some(b) = Broker::get().await else { return };
    let row = Row::start(
        7,
        "r07_consumer_static_leave_and_rejoin",
        "consumer: static leave (epoch -2) and rejoin, same partitions",
    );
    if let Some(na) = b.no_consumer_protocol() {
        row.cell(na);
        return;
    }
    let topic = b.topic("static848", 4).await;
    let group = unique("static848");
    let wire_a = Wire::new(&b);
    let a = TestMember::start(wire_a.clone(), consumer(&group, Some("a")), &[&topic]).await;
    let other = TestMember::start(b.transport(), consumer(&group, Some("b")), &[&topic]).await;
    wait_balanced(&[&a, &other], 4, T).await;
    let before = a.wait_stable(Some(2), T).await;
    let other_before = other.snapshot().await.assignment;
    let other_revoked = other.seen().revoked.len();
    a.handle.close(CloseOptions::Default).await;
    let leave = wire_a
        .heartbeats()
        .into_iter()
        .rev()
        .find(|(_, h, _)| h.member_epoch < 0)
        .expect("a leave heartbeat");
    assert_eq!(leave.1.member_epoch, -2, "static leave");
    let leave_answer = match &leave.2 {
        Ok(r) => answer(r),
        Err(e) => e.clone(),
    };
    let wire = Wire::new(&b);
    let started = Instant::now();
    let back = TestMember::start(wire.clone(), consumer(&group, Some("a")), &[&topic]).await;
    let s = back.wait_stable(Some(2), T).await;
    let took = started.elapsed();
    assert_eq!(s.assignment, before.assignment, "the same partitions");
    assert_ne!(s.member_id, before.member_id, "a new process has a new id");
    let join = wire.heartbeats();
    let join_answer = join.first().expect("join").2.as_ref().expect("answered");
    assert_eq!(join_answer.error_code, 0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(other.snapshot().await.assignment, other_before);
    assert_eq!(other.seen().revoked.len(), other_revoked);
    let mut listed = common::described_members(&b.bootstrap, &group).await;
    listed.sort();
    let mut want = vec![s.member_id.clone(), other.snapshot().await.member_id];
    want.sort();
    assert_eq!(listed, want);
    row.cell(format!(
        "leave -2 -> {leave_answer}; rejoin (new id, same instance) -> NONE epoch {}; same {} partitions in {}; other member untouched",
        join_answer.member_epoch,
        s.assignment.len(),
        ms(took)
    ));
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r08_consumer_lost_first_answer_leaves_one_member() {
    let Some(b) = Broker::get().await else { return };
    let row = Row::start(
        8,
        "r08_consumer_lost_first_answer_leaves_one_member",
        "consumer: first heartbeat answer lost (dynamic, static), one member",
    );
    if let Some(na) = b.no_consumer_protocol() {
        row.cell(na);
        return;
    }
    let topic = b.topic("ghost848", 2).await;
    let mut cells = Vec::new();
    for instance in [None, Some("static-ghost")] {
        let group = unique("ghost848");
        let wire = Wire::new(&b);
        wire.lose_first_heartbeat_answer
            .store(true, Ordering::SeqCst);
        let started = Instant::now();
        let m = TestMember::start(wire.clone(), consumer(&group, instance), &[&topic]).await;
        let s = m.wait_stable(Some(2), T).await;
        let took = started.elapsed();
        let listed = common::described_members(&b.bootstrap, &group).await;
        assert_eq!(
            listed,
            vec![s.member_id.clone()],
            "one member ({instance:?})"
        );
        assert!(m.seen().fatal.is_none(), "{:?}", m.seen().fatal);
        let hb = wire.heartbeats();
        // The retry: the second epoch-0 heartbeat, same id.
        let retry = hb
            .iter()
            .filter(|(_, h, _)| h.member_epoch == 0)
            .nth(1)
            .expect("a retried join");
        assert_eq!(retry.1.member_id.as_str(), s.member_id);
        let retry_answer = match &retry.2 {
            Ok(r) => answer(r),
            Err(e) => e.clone(),
        };
        cells.push(format!(
            "{}: retry (same id, epoch 0) -> {retry_answer}, {} member, Stable in {}",
            if instance.is_some() {
                "static"
            } else {
                "dynamic"
            },
            listed.len(),
            ms(took)
        ));
        m.handle.close(CloseOptions::LeaveGroup).await;
    }
    row.cell(cells.join("; "));
}

/// What the broker answers to a ConsumerGroupHeartbeat at epoch 0 from a member id it still
/// has registered at a higher epoch (KAFKA-19233), measured with raw requests.
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r09_broker_epoch_zero_from_a_registered_member_id() {
    let Some(b) = Broker::get().await else { return };
    let row = Row::start(
        9,
        "r09_broker_epoch_zero_from_a_registered_member_id",
        "broker: epoch-0 heartbeat from a still-registered member id (KAFKA-19233)",
    );
    if let Some(na) = b.no_consumer_protocol() {
        row.cell(na);
        return;
    }
    let (a, c) = (b.topic("epoch0", 2).await, b.topic("epoch0", 2).await);
    let group = unique("epoch0");
    let (t, _) = common::transport(&b.bootstrap);
    let id = MemberId::generate().to_string();
    let joined = raw_heartbeat(&t, &group, &id, 0, None, &[&a], None).await;
    assert_eq!(joined.error_code, 0, "{}", code(joined.error_code));
    // Move the member past its first epoch (a member whose previous epoch is 0 may repeat
    // an epoch-0 heartbeat on every release): subscribe to a second topic, which bumps the
    // group epoch, and heartbeat with what it owns until it is at a later epoch.
    let first_epoch = joined.member_epoch;
    let mut epoch = first_epoch;
    let mut owned = owned_of(&joined).unwrap_or_default();
    let mut topics = vec![a.as_str(), c.as_str()];
    let deadline = Instant::now() + T;
    while epoch <= first_epoch {
        assert!(Instant::now() < deadline, "epoch stays {epoch}");
        let r = raw_heartbeat(&t, &group, &id, epoch, None, &topics, Some(owned.clone())).await;
        assert_eq!(r.error_code, 0, "{}", code(r.error_code));
        topics.clear(); // the subscription is unchanged from now on
        epoch = r.member_epoch;
        if let Some(o) = owned_of(&r) {
            owned = o;
        }
        if epoch <= first_epoch {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let registered_at = epoch;
    let started = Instant::now();
    let again = raw_heartbeat(&t, &group, &id, 0, None, &[&a, &c], None).await;
    let first_answer = answer(&again);
    // Retry as a member would (every 500 ms, the broker's heartbeat interval here) until
    // accepted; the refused heartbeats do not extend the session.
    let mut refused = 0;
    let mut last = again;
    while last.error_code != 0 {
        refused += 1;
        assert!(
            started.elapsed() < T,
            "still refused: {}",
            code(last.error_code)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        last = raw_heartbeat(&t, &group, &id, 0, None, &[&a, &c], None).await;
    }
    let accepted_after = started.elapsed();
    let _ = raw_heartbeat(&t, &group, &id, -1, None, &[], None).await;
    if let Some(accepted) = b.release.epoch_zero_rejoin_accepted() {
        assert_eq!(
            refused == 0,
            accepted,
            "Kafka {}: first answer {first_answer}",
            b.release
        );
    }
    if refused == 0 {
        row.cell(format!(
            "registered at epoch {registered_at}: -> {first_answer} at once (rejoin accepted)"
        ));
    } else {
        row.cell(format!(
            "registered at epoch {registered_at}: -> {first_answer}; refused {refused} times (every 500 ms), accepted after {} (session expiry, group.consumer.session.timeout.ms=6000)",
            ms(accepted_after)
        ));
    }
}

/// The member side of the row above: a member the broker fences while it is still
/// registered (its heartbeat carried a wrong epoch) rejoins at epoch 0 with its kept id.
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r10_consumer_fenced_while_registered_rejoins_with_its_id() {
    let Some(b) = Broker::get().await else { return };
    let row = Row::start(
        10,
        "r10_consumer_fenced_while_registered_rejoins_with_its_id",
        "consumer: fenced while still registered, rejoin with the kept id",
    );
    if let Some(na) = b.no_consumer_protocol() {
        row.cell(na);
        return;
    }
    let topic = b.topic("fenced848", 2).await;
    let group = unique("fenced848");
    let wire = Wire::new(&b);
    let m = TestMember::start(wire.clone(), consumer(&group, None), &[&topic]).await;
    let s = m.wait_stable(Some(2), T).await;
    let lost_before = m.seen().lost;
    let from = wire.heartbeats().len();
    wire.poison_next_heartbeat.store(true, Ordering::SeqCst);
    let started = Instant::now();
    m.wait_seen(T, |seen| seen.lost > lost_before).await;
    let again = m.wait_stable(Some(2), T).await;
    let took = started.elapsed();
    assert_eq!(again.member_id, s.member_id, "kept id");
    let after: Vec<_> = wire.heartbeats().into_iter().skip(from).collect();
    let fence = after
        .iter()
        .find_map(|(_, _, r)| r.as_ref().ok().filter(|r| r.error_code != 0))
        .map(|r| code(r.error_code))
        .expect("the poisoned heartbeat was refused");
    let rejoins: Vec<String> = after
        .iter()
        .filter(|(_, h, _)| h.member_epoch == 0)
        .map(|(_, _, r)| match r {
            Ok(r) => answer(r),
            Err(e) => e.clone(),
        })
        .collect();
    let refused = rejoins.iter().filter(|a| !a.starts_with("NONE")).count();
    assert_eq!(
        common::described_members(&b.bootstrap, &group).await,
        vec![s.member_id.clone()]
    );
    m.handle.close(CloseOptions::LeaveGroup).await;
    if b.release.epoch_zero_rejoin_accepted() == Some(true) {
        assert_eq!(refused, 0, "Kafka {}: {rejoins:?}", b.release);
    }
    // Refused rejoins (4.0, 4.1) are paced by the retry backoff (100 ms doubling to 1 s, ±20 %):
    // about a dozen in a 6 s session, never thousands.
    let paced_max = 3 + took.as_secs() as usize * 2;
    assert!(
        refused <= paced_max,
        "Kafka {}: {refused} refused rejoins in {took:?} (at most {paced_max} with the backoff)",
        b.release
    );
    let refused_with = rejoins
        .iter()
        .find(|a| !a.starts_with("NONE"))
        .cloned()
        .unwrap_or_default();
    row.cell(if refused == 0 {
        format!(
            "wrong epoch -> {fence}; partitions Lost; rejoin (kept id, epoch 0) -> {}; Stable again after {}",
            rejoins.first().cloned().unwrap_or_default(),
            ms(took)
        )
    } else {
        format!(
            "wrong epoch -> {fence}; partitions Lost; rejoin (kept id, epoch 0) refused {refused} times ({refused_with}; rejoins paced by the retry backoff, 100 ms doubling to 1 s), Stable again after {}",
            ms(took)
        )
    });
}

/// A static join while another member id holds the instance id, then that member's -2 leave,
/// with raw requests.
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r11_broker_unreleased_instance_id() {
    let Some(b) = Broker::get().await else { return };
    let row = Row::start(
        11,
        "r11_broker_unreleased_instance_id",
        "broker: static join while the instance id is held, then after its -2 leave",
    );
    if let Some(na) = b.no_consumer_protocol() {
        row.cell(na);
        return;
    }
    let topic = b.topic("unreleased", 2).await;
    let group = unique("unreleased");
    let (t, _) = common::transport(&b.bootstrap);
    let (old, new) = (
        MemberId::generate().to_string(),
        MemberId::generate().to_string(),
    );
    let a = raw_heartbeat(&t, &group, &old, 0, Some("i"), &[&topic], None).await;
    assert_eq!(a.error_code, 0);
    let held = raw_heartbeat(&t, &group, &new, 0, Some("i"), &[&topic], None).await;
    assert_eq!(code(held.error_code), "UNRELEASED_INSTANCE_ID");
    let leave = raw_heartbeat(&t, &group, &old, -2, Some("i"), &[], None).await;
    assert_eq!(leave.error_code, 0, "{}", code(leave.error_code));
    let taken = raw_heartbeat(&t, &group, &new, 0, Some("i"), &[&topic], None).await;
    assert_eq!(taken.error_code, 0, "{}", code(taken.error_code));
    let _ = raw_heartbeat(&t, &group, &new, -1, Some("i"), &[], None).await;
    row.cell(format!(
        "join with a new id -> {}; -2 leave of the holder -> {}; join again -> {} (epoch {} -> {})",
        code(held.error_code),
        answer(&leave),
        answer(&taken),
        a.member_epoch,
        taken.member_epoch
    ));
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_consumer_regex_subscription() {
    let Some(b) = Broker::get().await else { return };
    let row = Row::start(
        12,
        "r12_consumer_regex_subscription",
        "consumer: regex subscription evaluated by the broker",
    );
    let prefix = unique("rx");
    let t = b.transport();
    for suffix in ["a", "b"] {
        common::create_topic(&*t, &format!("{prefix}-{suffix}"), 2).await;
    }
    common::create_topic(&*t, &format!("other-{prefix}"), 2).await;
    let pattern = format!("{}-.*", prefix.replace('-', "\\-"));
    let group = unique("rx");
    let mut c = consumer(&group, None);
    c.protocol = GroupProtocol::Auto;
    let started = Instant::now();
    let m = TestMember::start_regex(b.transport(), c, &pattern).await;
    if !b.release.consumer_protocol() {
        // auto cannot fall back: classic has no broker-side regex.
        let e = wait_fatal(&m, T).await;
        assert!(
            matches!(e, GroupError::RegexNeedsConsumerProtocol { .. }),
            "{e:?}"
        );
        row.cell(format!(
            "{}: auto + regex -> Fatal(RegexNeedsConsumerProtocol)",
            b.no_consumer_protocol().unwrap()
        ));
        return;
    }
    let s = m.wait_stable(Some(4), Duration::from_secs(60)).await;
    let took = started.elapsed();
    let topics: BTreeSet<String> = s.assignment.iter().map(|tp| tp.topic.to_string()).collect();
    assert_eq!(
        topics,
        BTreeSet::from([format!("{prefix}-a"), format!("{prefix}-b")])
    );
    m.handle.close(CloseOptions::Default).await;
    row.cell(format!(
        "2 matching topics of 3, 4 partitions, Stable in {}",
        ms(took)
    ));
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_online_migration_classic_to_consumer() {
    let Some(b) = Broker::get().await else { return };
    let row = Row::start(
        13,
        "r13_online_migration_classic_to_consumer",
        "classic group upgraded online by a consumer-protocol member",
    );
    if let Some(na) = b.no_consumer_protocol() {
        row.cell(na);
        return;
    }
    let topic = b.topic("mixed", 6).await;
    let group = unique("mixed");
    let old = TestMember::start(b.transport(), classic(&group, Some("old")), &[&topic]).await;
    old.wait_stable(Some(6), T).await;
    let started = Instant::now();
    let new = TestMember::start(b.transport(), consumer(&group, Some("new")), &[&topic]).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let (x, y) = loop {
        let (a, m) = (old.snapshot().await, new.snapshot().await);
        let x: BTreeSet<TopicPartition> = a.assignment.iter().cloned().collect();
        let y: BTreeSet<TopicPartition> = m.assignment.iter().cloned().collect();
        if a.state == MemberState::Stable
            && m.state == MemberState::Stable
            && !x.is_empty()
            && !y.is_empty()
            && x.is_disjoint(&y)
            && x.len() + y.len() == 6
        {
            break (x.len(), y.len());
        }
        assert!(Instant::now() < deadline, "classic {a:?}\nconsumer {m:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let took = started.elapsed();
    assert!(old.seen().fatal.is_none() && new.seen().fatal.is_none());
    row.cell(format!(
        "classic member {x} partitions, consumer member {y}, balanced in {}",
        ms(took)
    ));
}

/// One classic group of this crate's members (cooperative-sticky) and Kafka's own
/// VerifiableConsumer (CooperativeStickyAssignor) of the broker's release, whose jars
/// tests/kafka/peer.sh fetches for `KAFKA_VERSION`. Two groups, one after the other: the first
/// led by a Java member (the Java assignor of that release reads our subscriptions, our
/// members take its assignment), the second by ours (the other way round). In each, 2 + 2
/// members must split the partitions disjointly and completely; then a member that does not
/// lead leaves, and the cooperative rebalance must hand its partitions to the others without
/// revoking any partition a staying member owns.
#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r14_classic_cooperative_sticky_with_java_members() {
    let Some(b) = Broker::get().await else { return };
    let row = Row::start(
        14,
        "r14_classic_cooperative_sticky_with_java_members",
        "cooperative-sticky with Java members of that version's client",
    );
    // Runs peer.sh (a Maven fetch the first time for a release): off the runtime's threads.
    let java_version = tokio::task::block_in_place(java_peer::peer_version);
    if b.release.patch.is_some() {
        assert_eq!(
            java_version,
            b.release.to_string(),
            "the Java peers are of the broker's release"
        );
    }
    let mut cells = vec![format!("kafka-clients {java_version}")];
    for java_leads in [true, false] {
        cells.push(cooperative_with_java(&b, java_leads).await);
    }
    row.cell(cells.join("; "));
}

/// A partition as VerifiableConsumer reports it.
type JavaTp = (String, i32);

/// Members of one group: ours and Java ones.
struct Mixed {
    ours: Vec<TestMember>,
    javas: Vec<JavaConsumer>,
}

impl Mixed {
    /// Each member's partitions (ours first, then the Java members, each in the order they
    /// joined) once ours are all Stable and every member owns 1 or more partitions, sizes
    /// within one of each other, disjoint and covering `all`; panics after 60 s or if a Java
    /// member exits.
    async fn wait_split(
        &self,
        all: &BTreeSet<JavaTp>,
        what: &str,
    ) -> (Vec<BTreeSet<JavaTp>>, Vec<Snapshot>) {
        let timeout = Duration::from_secs(60);
        let deadline = Instant::now() + timeout;
        loop {
            let mut snaps = Vec::new();
            for m in &self.ours {
                snaps.push(m.snapshot().await);
            }
            let sets: Vec<BTreeSet<JavaTp>> = snaps
                .iter()
                .map(|s| {
                    s.assignment
                        .iter()
                        .map(|tp| (tp.topic.to_string(), tp.partition))
                        .collect()
                })
                .chain(self.javas.iter().map(JavaConsumer::assignment))
                .collect();
            let union: BTreeSet<&JavaTp> = sets.iter().flatten().collect();
            let sizes: Vec<usize> = sets.iter().map(BTreeSet::len).collect();
            let (min, max) = (sizes.iter().min(), sizes.iter().max());
            if snaps.iter().all(|s| s.state == MemberState::Stable)
                && min.is_some_and(|&m| m > 0)
                && max.zip(min).is_some_and(|(a, b)| a - b <= 1)
                && sizes.iter().sum::<usize>() == all.len()
                && union.len() == all.len()
                && union.iter().all(|tp| all.contains(*tp))
            {
                return (sets, snaps);
            }
            if Instant::now() >= deadline || self.javas.iter().any(JavaConsumer::exited) {
                let reports: Vec<String> = self.javas.iter().map(|j| j.report(what)).collect();
                panic!(
                    "{what}: not split disjointly and completely within {timeout:?}\nours: {snaps:#?}\n{}",
                    reports.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// "2/1/2/1": the sizes of `sets`.
fn sizes(sets: &[BTreeSet<JavaTp>]) -> String {
    let n: Vec<String> = sets.iter().map(|s| s.len().to_string()).collect();
    n.join("/")
}

/// The group of [`r14_classic_cooperative_sticky_with_java_members`] led by a Java member or
/// by ours; returns its part of the cell.
async fn cooperative_with_java(b: &Broker, java_leads: bool) -> String {
    const PARTITIONS: i32 = 6;
    let topic = b.topic("coop-java", PARTITIONS).await;
    let group = unique("coop-java");
    let all: BTreeSet<JavaTp> = (0..PARTITIONS).map(|p| (topic.clone(), p)).collect();
    let java = || {
        JavaConsumer::builder(&b.bootstrap, &topic, &group)
            .assignment_strategy(java_peer::COOPERATIVE_STICKY)
            .session_timeout(Duration::from_secs(6))
            .property("heartbeat.interval.ms", "500")
            .spawn()
    };
    let rust = async || {
        let c = classic(&group, None)
            .with_assignor(consumer_membership::machine::classic::assignor::CooperativeSticky);
        TestMember::start(b.transport(), c, &[topic.as_str()]).await
    };

    // The first member alone (the leader), then the three others at once.
    let mut g = Mixed {
        ours: Vec::new(),
        javas: Vec::new(),
    };
    if java_leads {
        let j = java();
        assert!(
            j.wait_for(Duration::from_secs(60), |a| a.len() == all.len())
                .await,
            "{}",
            j.report("the first Java member alone")
        );
        g.javas.push(j);
    } else {
        let r = rust().await;
        r.wait_stable(Some(all.len()), T).await;
        g.ours.push(r);
    }
    let started = Instant::now();
    g.javas.push(java());
    if java_leads {
        g.ours.push(rust().await);
    } else {
        g.javas.push(java());
    }
    g.ours.push(rust().await);
    let (before, snaps) = g.wait_split(&all, "4 members").await;
    let joined = started.elapsed();
    if java_leads {
        assert!(snaps.iter().all(|s| !s.leader), "a Java member leads");
    } else {
        assert!(snaps[0].leader, "the first of ours leads: {snaps:?}");
    }
    let generation = snaps[0].generation;

    // A member that does not lead leaves: one of ours (LeaveGroup on close) when a Java
    // member leads, a Java member (SIGTERM: close(), LeaveGroup) when ours does.
    let mut revoked_before: Vec<usize> = g.ours.iter().map(|m| m.seen().revoked.len()).collect();
    let mut events_before: Vec<usize> = g.javas.iter().map(|j| j.event_log().len()).collect();
    let mut kept = before.clone();
    let started = Instant::now();
    let leaver = if java_leads {
        let m = g.ours.remove(0);
        revoked_before.remove(0);
        kept.remove(0);
        m.handle.close(CloseOptions::Default).await;
        "one of ours"
    } else {
        let j = g.javas.remove(0);
        events_before.remove(0);
        kept.remove(g.ours.len());
        j.stop_async().await;
        "a Java member"
    };
    let (after, snaps) = g.wait_split(&all, "3 members after a leave").await;
    let rebalanced = started.elapsed();

    // Cooperative: every staying member kept what it owned and had nothing revoked.
    for (i, (was, now)) in kept.iter().zip(&after).enumerate() {
        assert!(
            was.is_subset(now),
            "staying member {i} (ours first) lost {:?}",
            was.difference(now).collect::<Vec<_>>()
        );
    }
    for (m, n) in g.ours.iter().zip(&revoked_before) {
        let seen = m.seen();
        assert_eq!(seen.revoked.len(), *n, "ours revoked {:?}", seen.revoked);
        assert!(seen.fatal.is_none() && seen.lost == 0, "{seen:?}");
    }
    for (j, n) in g.javas.iter().zip(&events_before) {
        let revoked: Vec<PeerEvent> = j
            .event_log()
            .into_iter()
            .skip(*n)
            .filter(|e| e.name == "partitions_revoked" && !e.partitions.is_empty())
            .collect();
        assert!(
            revoked.is_empty(),
            "{}",
            j.report(&format!("revoked after the leave: {revoked:?}"))
        );
    }
    let generation_after = snaps[0].generation;
    for m in &g.ours {
        m.handle.close(CloseOptions::LeaveGroup).await;
    }
    for j in g.javas {
        j.stop_async().await;
    }
    format!(
        "{} leads: 2 ours + 2 Java split {PARTITIONS} partitions {} (generation {generation}) in {}; {leaver} leaves: {} (generation {generation_after}) in {}, no staying partition revoked",
        if java_leads { "Java" } else { "ours" },
        sizes(&before),
        ms(joined),
        sizes(&after),
        ms(rebalanced)
    )
}
