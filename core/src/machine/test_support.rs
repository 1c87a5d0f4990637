//! What the members' unit tests share: one [`Harness`] that drives any member through its
//! sans-IO surface ([`Machine`]) (requests out, answers and timeouts in, events collected), the group
//! configurations they start from, and the answers and request readers every family uses.
//! Each family's tests add their own steps (`impl Harness<TheirMember>`) on top.

use std::time::{Duration, Instant};

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::metadata_response::{
    MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse,
    FindCoordinatorResponse, MetadataResponse, OffsetCommitResponse, RequestKind, ResponseKind,
    ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::config::GroupConfig;
use crate::error::TransportError;
use crate::machine::Machine;
use crate::machine::consumer::ConsumerMember;
use crate::machine::share::ShareMember;
use crate::machine::streams::StreamsMember;
use crate::messages::{StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse};
use crate::request::{Broker, Outbound, Request, Response, ResponseBody, Target};

/// base64url("foobarbazqux1234") without padding: a valid 22-character member id.
pub(crate) const ID: &str = "Zm9vYmFyYmF6cXV4MTIzNA";

pub(crate) fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_owned())
}

/// An OffsetCommit answer for t-0 with `code`.
pub(crate) fn commit_answer(code: i16) -> ResponseKind {
    ResponseKind::OffsetCommit(OffsetCommitResponse::default().with_topics(vec![
        OffsetCommitResponseTopic::default()
            .with_name(TopicName(s("t")))
            .with_partitions(vec![
                OffsetCommitResponsePartition::default()
                    .with_partition_index(0)
                    .with_error_code(code),
            ]),
    ]))
}

/// Group `group` with a 10 s session, 1 s heartbeats, a 30 s poll interval and seed 1.
pub(crate) fn base_config(group: &str, instance: Option<&str>) -> GroupConfig {
    let mut c = GroupConfig::new(group);
    c.instance_id = instance.map(String::from);
    c.session_timeout = Duration::from_secs(10);
    c.heartbeat_interval = Duration::from_secs(1);
    c.max_poll_interval = Duration::from_secs(30);
    c.seed = Some(1);
    c
}

/// [`base_config`] with retries backing off from 100 ms to 1 s and a 5 s request timeout.
pub(crate) fn epoch_config(group: &str, instance: Option<&str>) -> GroupConfig {
    let mut c = base_config(group, instance);
    c.retry_backoff = Duration::from_millis(100);
    c.retry_backoff_max = Duration::from_secs(1);
    c.request_timeout = Duration::from_secs(5);
    c
}

/// The coordinator [`find_coordinator_answer`] names with node 1.
pub(crate) fn coordinator_broker() -> Broker {
    Broker {
        node_id: 1,
        host: "h".into(),
        port: 9092,
    }
}

/// A FindCoordinator answer: `group`'s coordinator is `node` at h:9092.
pub(crate) fn find_coordinator_answer(group: &str, node: i32) -> ResponseKind {
    let c = Coordinator::default()
        .with_key(s(group))
        .with_node_id(BrokerId(node))
        .with_host(s("h"))
        .with_port(9092);
    ResponseKind::FindCoordinator(FindCoordinatorResponse::default().with_coordinators(vec![c]))
}

/// A Metadata answer with `topics` (name, id, partition count).
pub(crate) fn metadata_answer(topics: &[(&str, Uuid, i32)]) -> ResponseKind {
    let topics = topics
        .iter()
        .map(|(name, id, n)| {
            MetadataResponseTopic::default()
                .with_name(Some(TopicName(s(name))))
                .with_topic_id(*id)
                .with_partitions(
                    (0..*n)
                        .map(|p| MetadataResponsePartition::default().with_partition_index(p))
                        .collect(),
                )
        })
        .collect();
    ResponseKind::Metadata(MetadataResponse::default().with_topics(topics))
}

/// The Kafka body of a request, built at its highest version.
pub(crate) fn body(out: &Outbound) -> RequestKind {
    match &out.request {
        Request::Raw { body, .. } => (**body).clone(),
        other => (other.build(*other.versions().end()).unwrap().into_kafka()).unwrap(),
    }
}

pub(crate) fn is_metadata(out: &Outbound) -> bool {
    matches!(out.request, Request::Metadata { .. })
}

pub(crate) fn is_find_coordinator(out: &Outbound) -> bool {
    matches!(out.request, Request::FindCoordinator { .. })
}

/// A member, the test's clock, and the events the member has given so far.
pub(crate) struct Harness<M: Machine> {
    pub(crate) m: M,
    pub(crate) now: Instant,
    pub(crate) events: Vec<M::Event>,
}

impl<M: Machine> Harness<M> {
    /// The member `make` builds at the tests' base instant.
    pub(crate) fn start(make: impl FnOnce(Instant) -> M) -> Self {
        let now = crate::testutil::epoch();
        Self {
            m: make(now),
            now,
            events: Vec::new(),
        }
    }

    /// Every request the member has to send now; collects its events.
    pub(crate) fn drain(&mut self) -> Vec<Outbound> {
        let mut out = Vec::new();
        while let Some(o) = self.m.poll_request() {
            out.push(o);
            assert!(
                out.len() < 50,
                "the member keeps emitting requests: {out:#?}"
            );
        }
        self.collect_events();
        out
    }

    /// Moves the member's events into `events`; requests stay queued.
    pub(crate) fn collect_events(&mut self) {
        while let Some(e) = self.m.poll_event() {
            self.events.push(e);
        }
    }

    /// Expects exactly one request.
    pub(crate) fn one(&mut self) -> Outbound {
        let mut out = self.drain();
        assert_eq!(out.len(), 1, "expected one request, got {out:#?}");
        out.pop().unwrap()
    }

    /// Expects no request.
    pub(crate) fn nothing(&mut self, why: &str) {
        let out = self.drain();
        assert!(out.is_empty(), "{why}: {out:#?}");
    }

    /// Answers `out` with a Kafka body.
    pub(crate) fn answer(&mut self, out: &Outbound, body: ResponseKind) {
        self.answer_body(out, ResponseBody::Kafka(body));
    }

    /// Answers `out` with `body`, at the highest version the request allows.
    pub(crate) fn answer_body(&mut self, out: &Outbound, body: ResponseBody) {
        self.m.handle_response(
            out.id,
            Ok(Response {
                version: *out.request.versions().end(),
                body,
            }),
            self.now,
        );
    }

    /// Fails `out`: the connection to h:9092 was reset.
    pub(crate) fn fail(&mut self, out: &Outbound) {
        self.m.handle_response(
            out.id,
            Err(TransportError::Disconnected {
                addr: "h:9092".into(),
                reason: "reset".into(),
            }),
            self.now,
        );
    }

    /// Moves the clock on by `d` and lets the member's timers fire.
    pub(crate) fn advance(&mut self, d: Duration) {
        self.now += d;
        self.m.handle_timeout(self.now);
    }

    /// Answers the coordinator lookup `fc`, sent to a bootstrap server: `group`'s coordinator
    /// is node 1.
    pub(crate) fn answer_lookup(&mut self, fc: &Outbound, group: &str) {
        assert_eq!(fc.target, Target::Bootstrap);
        self.answer(fc, find_coordinator_answer(group, 1));
    }
}

/// An epoch member's heartbeat, as its tests read and answer it.
pub(crate) trait Heartbeats: Machine {
    type Heartbeat;
    type HeartbeatAnswer;
    /// The heartbeat `out` carries; panics on any other request.
    fn heartbeat_of(out: &Outbound) -> Self::Heartbeat;
    fn heartbeat_answer(r: Self::HeartbeatAnswer) -> ResponseBody;
}

impl Heartbeats for ConsumerMember {
    type Heartbeat = ConsumerGroupHeartbeatRequest;
    type HeartbeatAnswer = ConsumerGroupHeartbeatResponse;

    fn heartbeat_of(out: &Outbound) -> ConsumerGroupHeartbeatRequest {
        match body(out) {
            RequestKind::ConsumerGroupHeartbeat(b) => b,
            other => panic!("expected a ConsumerGroupHeartbeat, got {other:?}"),
        }
    }

    fn heartbeat_answer(r: ConsumerGroupHeartbeatResponse) -> ResponseBody {
        ResponseBody::Kafka(ResponseKind::ConsumerGroupHeartbeat(r))
    }
}

impl Heartbeats for StreamsMember {
    type Heartbeat = StreamsGroupHeartbeatRequest;
    type HeartbeatAnswer = StreamsGroupHeartbeatResponse;

    fn heartbeat_of(out: &Outbound) -> StreamsGroupHeartbeatRequest {
        match &out.request {
            Request::StreamsGroupHeartbeat { body, .. } => (**body).clone(),
            other => panic!("expected a StreamsGroupHeartbeat, got {other:?}"),
        }
    }

    fn heartbeat_answer(r: StreamsGroupHeartbeatResponse) -> ResponseBody {
        ResponseBody::StreamsGroupHeartbeat(r)
    }
}

impl Heartbeats for ShareMember {
    type Heartbeat = ShareGroupHeartbeatRequest;
    type HeartbeatAnswer = ShareGroupHeartbeatResponse;

    fn heartbeat_of(out: &Outbound) -> ShareGroupHeartbeatRequest {
        match body(out) {
            RequestKind::ShareGroupHeartbeat(b) => b,
            other => panic!("expected a ShareGroupHeartbeat, got {other:?}"),
        }
    }

    fn heartbeat_answer(r: ShareGroupHeartbeatResponse) -> ResponseBody {
        ResponseBody::Kafka(ResponseKind::ShareGroupHeartbeat(r))
    }
}

impl<M: Heartbeats> Harness<M> {
    /// Expects exactly one request, a heartbeat.
    pub(crate) fn expect_hb(&mut self) -> (Outbound, M::Heartbeat) {
        let out = self.one();
        let b = M::heartbeat_of(&out);
        (out, b)
    }

    /// Answers the heartbeat `out` with `r`.
    pub(crate) fn hb_answer(&mut self, out: &Outbound, r: M::HeartbeatAnswer) {
        self.answer_body(out, M::heartbeat_answer(r));
    }
}

/// What `$out` gives for each of `$events` that matches `$pat`, in order.
macro_rules! picked {
    ($events:expr, $pat:pat => $out:expr) => {
        $events
            .iter()
            .filter_map(|e| match e {
                $pat => Some($out),
                _ => None,
            })
            .collect()
    };
}
pub(crate) use picked;
