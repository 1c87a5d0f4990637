//! A streams group whose topology another client declared first, on the real broker: a raw
//! client (StreamsGroupHeartbeat requests of its own over `TcpTransport`) joins the group first
//! with a topology of its own at topology epoch 1 (one subtopology, "x", reading the input
//! topic). The coordinator keeps the topology of the group's first member and accepts a later
//! member declaring a lower topology epoch with it, status STALE_TOPOLOGY
//! (GroupMetadataManager.maybeUpdateTopology / maybeSetTopologyStaleStatus), and assigns that
//! member tasks of the group's subtopologies. Our member (topology epoch 0, subtopology "0")
//! is then assigned tasks "x_N", which it cannot run: it refuses them (`TasksRefused`, never
//! taken, never reported owned), stays in the group and is never `Fatal`. Before tasks of unknown
//! subtopologies were refused, this stopped our member with an invalid-response error: any
//! client that could join the group first could stop ours through the coordinator.
//!
//! Run with `tests/kafka/with-broker.sh cargo test --all-features --test streams_rogue_broker`.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{create_topic, unique};
use consumer_membership::MemberId;
use consumer_membership::kafka_protocol::messages::{GroupId, TopicName};
use consumer_membership::kafka_protocol::protocol::StrBytes;
use consumer_membership::messages::StreamsGroupHeartbeatRequest;
use consumer_membership::messages::streams_group_heartbeat_request as req;
use consumer_membership::request::{Request, ResponseBody, Target};
use consumer_membership::streams::{
    StreamsConfig, StreamsEvent, StreamsGroupMember, StreamsProcess, StreamsTopology, Subtopology,
};
use consumer_membership::transport::Transport;
use consumer_membership::{CloseOptions, GroupConfig, MemberState, TcpTransport};

const PARTITIONS: i32 = 4;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// The rogue: a member id, a process id and the epoch the coordinator gave it.
struct Rogue {
    transport: Arc<TcpTransport>,
    group: String,
    member_id: String,
    epoch: i32,
    /// The active tasks the coordinator assigned it last, which it reports owned (it takes
    /// every assignment at once, so the coordinator can move tasks to our member).
    active: Vec<req::TaskIds>,
}

impl Rogue {
    /// One StreamsGroupHeartbeat to the bootstrap broker (the coordinator, with one broker);
    /// returns the answer's (error code, status codes), and keeps the epoch it gives.
    async fn heartbeat(&mut self, body: StreamsGroupHeartbeatRequest) -> (i16, Vec<i8>) {
        let r = self
            .transport
            .send(
                Target::Bootstrap,
                Request::StreamsGroupHeartbeat {
                    body: Box::new(body),
                    versions: 0..=0,
                },
                Duration::from_secs(15),
            )
            .await
            .expect("StreamsGroupHeartbeat answered");
        let ResponseBody::StreamsGroupHeartbeat(r) = r.body else {
            panic!("not a StreamsGroupHeartbeat answer: {:?}", r.body)
        };
        if r.error_code == 0 && r.member_epoch >= 0 {
            self.epoch = r.member_epoch;
        }
        if let Some(active) = &r.active_tasks {
            self.active = active
                .iter()
                .map(|t| {
                    req::TaskIds::default()
                        .with_subtopology_id(t.subtopology_id.clone())
                        .with_partitions(t.partitions.clone())
                })
                .collect();
        }
        let statuses = r.status.unwrap_or_default();
        (
            r.error_code,
            statuses.iter().map(|s| s.status_code).collect(),
        )
    }

    fn base(&self, epoch: i32) -> StreamsGroupHeartbeatRequest {
        StreamsGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(&self.group)))
            .with_member_id(s(&self.member_id))
            .with_member_epoch(epoch)
            .with_rebalance_timeout_ms(-1)
    }

    /// Joins with topology epoch 1 and one subtopology "x" reading `input`.
    async fn join(&mut self, input: &str) {
        let topology = req::Topology::default()
            .with_epoch(1)
            .with_subtopologies(vec![
                req::Subtopology::default()
                    .with_subtopology_id(s("x"))
                    .with_source_topics(vec![TopicName(s(input))]),
            ]);
        let body = self
            .base(0)
            .with_topology(Some(topology))
            .with_rebalance_timeout_ms(300_000)
            .with_process_id(Some(s("rogue-process")))
            .with_client_tags(Some(Vec::new()))
            .with_active_tasks(Some(Vec::new()))
            .with_standby_tasks(Some(Vec::new()))
            .with_warmup_tasks(Some(Vec::new()));
        let (code, _) = self.heartbeat(body).await;
        assert_eq!(code, 0, "the rogue's join was refused");
    }

    /// A heartbeat that keeps the rogue in the group.
    async fn beat(&mut self) {
        let body = self
            .base(self.epoch)
            .with_active_tasks(Some(self.active.clone()))
            .with_standby_tasks(Some(Vec::new()))
            .with_warmup_tasks(Some(Vec::new()));
        let (code, _) = self.heartbeat(body).await;
        assert_eq!(code, 0, "the rogue's heartbeat was refused");
    }

    async fn leave(&mut self) {
        let body = self.base(-1);
        self.heartbeat(body).await;
    }
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_of_a_topology_another_client_declared_are_refused_and_our_member_runs_on() {
    common::init_tracing();
    let Some(bootstrap) = common::bootstrap() else {
        return;
    };
    let input = unique("streams-rogue-in");
    let group = unique("streams-rogue");
    let (admin, _) = common::transport(&bootstrap);
    create_topic(admin.as_ref(), &input, PARTITIONS).await;

    let mut rogue = Rogue {
        transport: admin.clone(),
        group: group.clone(),
        member_id: MemberId::generate().as_str().to_owned(),
        epoch: 0,
        active: Vec::new(),
    };
    rogue.join(&input).await;

    let (transport, _) = common::transport(&bootstrap);
    let topology = StreamsTopology::new(0, vec![Subtopology::new("0", [input.clone()])]);
    let mut member = StreamsGroupMember::start(
        transport,
        GroupConfig::new(&group),
        StreamsConfig::new(topology),
        StreamsProcess::new(uuid::Uuid::new_v4().to_string(), None),
    )
    .expect("start");
    let handle = member.handle();
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = events.clone();
    let reader = tokio::spawn(async move {
        while let Some(e) = member.next_event().await {
            seen.lock().unwrap().push(e);
        }
    });

    // The rogue heartbeats while ours joins and runs; ours must refuse the rogue's tasks.
    let deadline = Instant::now() + Duration::from_secs(60);
    let refused = loop {
        rogue.beat().await;
        let refused = events.lock().unwrap().iter().find_map(|e| match e {
            StreamsEvent::TasksRefused { refused } if !refused.is_empty() => Some(refused.clone()),
            _ => None,
        });
        if let Some(r) = refused {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "no TasksRefused: {:#?}",
            events.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    println!("refused: {refused:?}");
    assert!(
        refused
            .active
            .keys()
            .chain(refused.standby.keys())
            .all(|id| id == "x"),
        "{refused:?}"
    );
    // Several heartbeat intervals on: in the group, Stable, holding none of the rogue's tasks.
    for _ in 0..10 {
        rogue.beat().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let snapshot = handle.snapshot().await.expect("the member runs");
    assert_eq!(snapshot.state, MemberState::Stable, "{snapshot:?}");
    assert!(snapshot.epoch > 0, "{snapshot:?}");
    assert!(
        snapshot.tasks.active.iter().all(|t| t.subtopology != "x"),
        "{snapshot:?}"
    );
    assert!(
        !events
            .lock()
            .unwrap()
            .iter()
            .any(|e| matches!(e, StreamsEvent::Fatal(_))),
        "{:#?}",
        events.lock().unwrap()
    );
    rogue.leave().await;
    handle.close(CloseOptions::Default).await;
    tokio::time::timeout(Duration::from_secs(30), reader)
        .await
        .expect("events end after close")
        .unwrap();
}
