//! Micro-benchmarks of the sans-IO core's building blocks: member id generation, backoff, a
//! FindCoordinator round through the wire codec (build, encode, decode the answer, handle), one
//! heartbeat cycle of a Stable member of each protocol through the same codec, and the classic
//! assignors on 100 members x 1,000 partitions.

use std::hint::black_box;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use consumer_membership::MemberId;
use consumer_membership::backoff::{ExponentialBackoff, JitterRng};
use consumer_membership::config::{GroupConfig, GroupProtocol};
use consumer_membership::machine::TopicPartition;
use consumer_membership::machine::classic::ClassicMember;
use consumer_membership::machine::classic::assignor::{self, MemberMetadata};
use consumer_membership::machine::classic::subscription::{
    Assignment as ClassicAssignment, Subscription,
};
use consumer_membership::machine::consumer::ConsumerMember;
use consumer_membership::machine::coordinator::{CoordinatorLookup, LookupConfig};
use consumer_membership::machine::events::Event;
use consumer_membership::machine::events::MemberState;
use consumer_membership::request::{Outbound, Request, RequestId, Response, ResponseBody};
use consumer_membership::transport::wire::{self, BrokerVersions};
use criterion::{Criterion, criterion_group, criterion_main};
use kafka_protocol::messages::consumer_group_heartbeat_response::{
    Assignment as CghAssignment, TopicPartitions,
};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::metadata_response::{
    MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, ConsumerGroupHeartbeatResponse, FindCoordinatorResponse, HeartbeatResponse,
    JoinGroupResponse, MetadataResponse, RequestKind, ResponseKind, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

fn member_id(c: &mut Criterion) {
    c.bench_function("member_id/generate", |b| {
        b.iter(|| black_box(MemberId::generate()))
    });
    let id = MemberId::generate().to_string();
    c.bench_function("member_id/parse", |b| {
        b.iter(|| black_box(MemberId::parse(black_box(&id))))
    });
}

fn backoff(c: &mut Criterion) {
    let policy = ExponentialBackoff::retry(Duration::from_millis(100), Duration::from_secs(1));
    let mut rng = JitterRng::from_seed(1);
    c.bench_function("backoff/delay", |b| {
        b.iter(|| black_box(policy.delay(black_box(3), &mut rng)))
    });
}

fn find_coordinator_round(c: &mut Criterion) {
    let versions = BrokerVersions::all();
    let answer =
        ResponseKind::FindCoordinator(FindCoordinatorResponse::default().with_coordinators(vec![
        Coordinator::default()
            .with_key(StrBytes::from_static_str("g"))
            .with_node_id(BrokerId(1))
            .with_host(StrBytes::from_static_str("127.0.0.1"))
            .with_port(9092),
    ]));
    let config = LookupConfig {
        backoff: ExponentialBackoff::retry(Duration::from_millis(100), Duration::from_secs(1)),
        request_timeout: Duration::from_secs(30),
        seed: 1,
    };
    let now = Instant::now();
    c.bench_function("coordinator/find_round", |b| {
        b.iter(|| {
            let mut lookup = CoordinatorLookup::new(["g".to_owned()], config.clone());
            let out = lookup.poll_request().unwrap();
            let (api, version, body) = wire::build(&out.request, &versions).unwrap();
            let frame = wire::encode_request(&body, api, version, 1, "bench").unwrap();
            black_box(frame);
            let reply =
                wire::encode_response(&answer.clone().into(), ApiKey::FindCoordinator, version, 1)
                    .unwrap();
            let response = wire::decode_response(reply.freeze().slice(4..), api, version).unwrap();
            lookup.handle_response(out.id, Ok(response), now);
            black_box(lookup.coordinator("g").is_some())
        })
    });
}

// ---------------------------------------------------------------------------- heartbeats

/// The parts of a member's drive contract a heartbeat cycle uses (the classic and the KIP-848
/// member have the same methods, not a common trait).
trait Member {
    fn poll_request(&mut self) -> Option<Outbound>;
    fn poll_event(&mut self) -> Option<Event>;
    fn handle_response(&mut self, id: RequestId, response: Response, now: Instant);
    fn handle_timeout(&mut self, now: Instant);
    fn poll(&mut self, now: Instant);
    fn state(&self) -> MemberState;
}

macro_rules! member {
    ($t:ty) => {
        impl Member for $t {
            fn poll_request(&mut self) -> Option<Outbound> {
                <$t>::poll_request(self)
            }
            fn poll_event(&mut self) -> Option<Event> {
                <$t>::poll_event(self)
            }
            fn handle_response(&mut self, id: RequestId, response: Response, now: Instant) {
                <$t>::handle_response(self, id, Ok(response), now)
            }
            fn handle_timeout(&mut self, now: Instant) {
                <$t>::handle_timeout(self, now)
            }
            fn poll(&mut self, now: Instant) {
                <$t>::poll(self, now)
            }
            fn state(&self) -> MemberState {
                <$t>::state(self)
            }
        }
    };
}
member!(ClassicMember);
member!(ConsumerMember);

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_owned())
}

/// Sends `out` through the codec and answers it with `answer`, as a transport and a broker
/// would: build at the negotiated version, encode the request frame, encode and decode the
/// response frame.
fn exchange(out: &Outbound, answer: &ResponseBody, versions: &BrokerVersions) -> Response {
    let (api, version, body) = wire::build(&out.request, versions).expect("build");
    black_box(wire::encode_request(&body, api, version, 1, "bench").expect("encode"));
    let reply = wire::encode_response(answer, api, version, 1).expect("encode answer");
    wire::decode_response(reply.freeze().slice(4..), api, version).expect("decode answer")
}

/// Drains `m`'s requests, answering each with `answer(request)`, until it sends nothing more.
fn settle<M: Member>(
    m: &mut M,
    now: Instant,
    versions: &BrokerVersions,
    answer: &mut dyn FnMut(&Outbound) -> ResponseKind,
) {
    for _ in 0..16 {
        let Some(out) = m.poll_request() else {
            while m.poll_event().is_some() {}
            return;
        };
        let response = exchange(&out, &answer(&out).into(), versions);
        m.handle_response(out.id, response, now);
    }
    panic!("the member keeps sending requests; state {}", m.state());
}

fn request_body(out: &Outbound) -> RequestKind {
    match &out.request {
        Request::Raw { body, .. } => (**body).clone(),
        other => (other
            .build(*other.versions().end())
            .expect("build")
            .into_kafka())
        .expect("kafka"),
    }
}

fn coordinator_answer() -> ResponseKind {
    ResponseKind::FindCoordinator(FindCoordinatorResponse::default().with_coordinators(vec![
        Coordinator::default()
            .with_key(s("g"))
            .with_node_id(BrokerId(1))
            .with_host(s("127.0.0.1"))
            .with_port(9092),
    ]))
}

fn group_config(protocol: GroupProtocol) -> GroupConfig {
    let mut c = GroupConfig::new("g");
    c.protocol = protocol;
    c.seed = Some(1);
    c
}

/// A classic member, follower in generation 1 owning t-0 and t-1, Stable.
fn stable_classic(now: Instant, versions: &BrokerVersions) -> ClassicMember {
    let mut m = ClassicMember::new(group_config(GroupProtocol::Classic), now).expect("config");
    m.subscribe(["t".to_string()], now).expect("subscribe");
    let assignment = ClassicAssignment {
        partitions: vec![TopicPartition::new("t", 0), TopicPartition::new("t", 1)],
        user_data: None,
    }
    .encode();
    settle(&mut m, now, versions, &mut |out| match request_body(out) {
        RequestKind::FindCoordinator(_) => coordinator_answer(),
        RequestKind::JoinGroup(_) => ResponseKind::JoinGroup(
            JoinGroupResponse::default()
                .with_generation_id(1)
                .with_protocol_type(Some(s("consumer")))
                .with_protocol_name(Some(s("range")))
                .with_leader(s("leader-other"))
                .with_member_id(s("bench-member")),
        ),
        RequestKind::SyncGroup(_) => ResponseKind::SyncGroup(
            SyncGroupResponse::default()
                .with_protocol_type(Some(s("consumer")))
                .with_protocol_name(Some(s("range")))
                .with_assignment(assignment.clone()),
        ),
        other => panic!("unexpected request while joining: {other:?}"),
    });
    assert_eq!(m.state(), MemberState::Stable);
    m
}

const TOPIC_ID: uuid::Uuid = uuid::Uuid::from_u128(0x7007);

/// A KIP-848 member at epoch 1 owning t-0 and t-1 (acknowledged), Stable.
fn stable_consumer(now: Instant, versions: &BrokerVersions) -> ConsumerMember {
    let mut m = ConsumerMember::new(group_config(GroupProtocol::Consumer), now).expect("config");
    m.subscribe(["t".to_string()], now).expect("subscribe");
    let id = m.member_id().to_owned();
    settle(&mut m, now, versions, &mut |out| match request_body(out) {
        RequestKind::FindCoordinator(_) => coordinator_answer(),
        RequestKind::ConsumerGroupHeartbeat(b) if b.member_epoch == 0 => {
            ResponseKind::ConsumerGroupHeartbeat(
                ConsumerGroupHeartbeatResponse::default()
                    .with_member_id(Some(s(&id)))
                    .with_member_epoch(1)
                    .with_heartbeat_interval_ms(1000)
                    .with_assignment(Some(CghAssignment::default().with_topic_partitions(vec![
                            TopicPartitions::default()
                                .with_topic_id(TOPIC_ID)
                                .with_partitions(vec![0, 1]),
                        ]))),
            )
        }
        RequestKind::ConsumerGroupHeartbeat(_) => consumer_heartbeat_answer(&id),
        RequestKind::Metadata(_) => {
            ResponseKind::Metadata(MetadataResponse::default().with_topics(vec![
                MetadataResponseTopic::default()
                    .with_name(Some(TopicName(s("t"))))
                    .with_topic_id(TOPIC_ID)
                    .with_partitions(
                        (0..4)
                            .map(|p| MetadataResponsePartition::default().with_partition_index(p))
                            .collect(),
                    ),
            ]))
        }
        other => panic!("unexpected request while joining: {other:?}"),
    });
    assert_eq!(m.state(), MemberState::Stable);
    m
}

fn consumer_heartbeat_answer(member_id: &str) -> ResponseKind {
    ResponseKind::ConsumerGroupHeartbeat(
        ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(s(member_id)))
            .with_member_epoch(1)
            .with_heartbeat_interval_ms(1000),
    )
}

/// One heartbeat cycle, timed: the heartbeat timer fires, the request is built at the
/// negotiated version and encoded, the canned answer decoded and handed back.
fn bench_heartbeat<M: Member>(
    c: &mut Criterion,
    name: &str,
    mut m: M,
    mut now: Instant,
    interval: Duration,
    answer: ResponseKind,
    versions: &BrokerVersions,
) {
    // The answer frame at the version the heartbeat is sent at, encoded once.
    now += interval;
    m.handle_timeout(now);
    let first = m.poll_request().expect("a heartbeat is due");
    let (api, version, _) = wire::build(&first.request, versions).expect("build");
    assert!(
        matches!(
            api.kafka(),
            Some(ApiKey::Heartbeat | ApiKey::ConsumerGroupHeartbeat)
        ),
        "{api:?}"
    );
    let frame = wire::encode_response(&answer.into(), api, version, 1)
        .expect("encode answer")
        .freeze()
        .slice(4..);
    let response = wire::decode_response(frame.clone(), api, version).expect("decode");
    m.handle_response(first.id, response, now);
    while m.poll_event().is_some() {}

    let mut correlation = 0i32;
    c.bench_function(name, |b| {
        b.iter(|| {
            now += interval;
            m.poll(now);
            m.handle_timeout(now);
            let out = m.poll_request().expect("a heartbeat is due");
            let (api, version, body) = wire::build(&out.request, versions).expect("build");
            correlation = correlation.wrapping_add(1);
            black_box(
                wire::encode_request(&body, api, version, correlation, "bench").expect("encode"),
            );
            let response = wire::decode_response(frame.clone(), api, version).expect("decode");
            m.handle_response(out.id, response, now);
            while let Some(e) = m.poll_event() {
                black_box(e);
            }
        })
    });
    assert_eq!(
        m.state(),
        MemberState::Stable,
        "{name}: still Stable after the run"
    );
    assert!(m.poll_request().is_none(), "{name}: nothing else was sent");
}

fn heartbeat_cycles(c: &mut Criterion) {
    let versions = BrokerVersions::all();
    let now = Instant::now();
    let classic = stable_classic(now, &versions);
    let interval = classic.config().heartbeat_interval;
    bench_heartbeat(
        c,
        "heartbeat/classic_stable",
        classic,
        now,
        interval,
        ResponseKind::Heartbeat(HeartbeatResponse::default()),
        &versions,
    );
    let consumer = stable_consumer(now, &versions);
    let answer = consumer_heartbeat_answer(consumer.member_id());
    bench_heartbeat(
        c,
        "heartbeat/consumer_stable",
        consumer,
        now,
        Duration::from_secs(1),
        answer,
        &versions,
    );
}

// ---------------------------------------------------------------------------- assignors

const MEMBERS: usize = 100;
const TOPICS: usize = 10;
const PARTITIONS_PER_TOPIC: i32 = 100;

fn assignor_input() -> (BTreeMap<String, i32>, Vec<MemberMetadata>) {
    let topics: Vec<String> = (0..TOPICS).map(|t| format!("topic-{t}")).collect();
    let partitions = topics
        .iter()
        .map(|t| (t.clone(), PARTITIONS_PER_TOPIC))
        .collect();
    let members = (0..MEMBERS)
        .map(|m| MemberMetadata {
            member_id: format!("member-{m:03}-{}", MemberId::generate()),
            instance_id: None,
            subscription: Subscription::new(topics.iter().cloned()),
        })
        .collect();
    (partitions, members)
}

fn assignors(c: &mut Criterion) {
    let (partitions, members) = assignor_input();
    for name in ["range", "roundrobin", "cooperative-sticky"] {
        let assignor = assignor::by_name(name).expect("known assignor");
        let result = assignor.assign(&partitions, &members);
        let total: usize = result.values().map(Vec::len).sum();
        assert_eq!(total, TOPICS * PARTITIONS_PER_TOPIC as usize, "{name}");
        c.bench_function(&format!("assignor/{name}/100x1000"), |b| {
            b.iter(|| black_box(assignor.assign(black_box(&partitions), black_box(&members))))
        });
    }

    // cooperative-sticky's common case: the members own their previous assignment (generation
    // 1) and one new member joins.
    let sticky = assignor::by_name("cooperative-sticky").expect("known assignor");
    let before = sticky.assign(&partitions, &members[..MEMBERS - 1]);
    let mut rejoin = members.clone();
    for m in &mut rejoin[..MEMBERS - 1] {
        m.subscription.owned_partitions = before[&m.member_id].clone();
        m.subscription.generation_id = 1;
    }
    c.bench_function("assignor/cooperative-sticky/100x1000_one_joins", |b| {
        b.iter(|| black_box(sticky.assign(black_box(&partitions), black_box(&rejoin))))
    });
}

criterion_group!(
    benches,
    member_id,
    backoff,
    find_coordinator_round,
    heartbeat_cycles,
    assignors
);
criterion_main!(benches);
