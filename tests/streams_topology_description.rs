//! The topology description push (KIP-1331) of our streams members against the real Kafka 4.4
//! broker (tests/kafka/with-broker.sh), whose test configuration names Kafka's reference plugin
//! (`group.streams.topology.description.plugin.class=
//! org.apache.kafka.server.streams.InMemoryTopologyDescriptionPlugin`, tests/kafka/broker.sh):
//!
//! - a member with a description joins, the broker asks for it in a StreamsGroupHeartbeat v1
//!   answer (`TopologyDescriptionRequired`), the member pushes it once
//!   (StreamsGroupTopologyDescriptionUpdate, API key 93) and reports it stored; StreamsGroupDescribe
//!   v1 with `IncludeTopologyDescription` serves it back field for field (status AVAILABLE);
//! - a member without a description is asked the same way, sends nothing, and runs as usual;
//!   the describe says NOT_STORED.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Recorder, unique};
use consumer_membership::kafka_protocol::messages::GroupId;
use consumer_membership::kafka_protocol::protocol::StrBytes;
use consumer_membership::messages::StreamsGroupDescribeRequest;
use consumer_membership::messages::streams_group_describe_response::DescribedGroup;
use consumer_membership::request::{Api, Request, ResponseBody, Target};
use consumer_membership::streams::{
    DescriptionStatus, NodeDescription, StreamsConfig, StreamsEvent, StreamsGroupMember,
    StreamsProcess, StreamsTopology, Subtopology, SubtopologyDescription, TopologyDescription,
};
use consumer_membership::transport::Transport;
use consumer_membership::{ClientConfig, CloseOptions, GroupConfig, MemberState, TcpTransport};

const T: Duration = Duration::from_secs(60);

fn broker() -> Option<String> {
    common::bootstrap_since((4, 4), "the topology description push (KIP-1331)")
}

/// The recording transport the members run on (every request, every answer's version).
type Seen = Arc<Recorder<TcpTransport>>;

/// One subtopology reading `input`; the description of a word counter over it, with a global
/// store.
fn application(input: &str) -> (StreamsTopology, TopologyDescription) {
    let topology = StreamsTopology::new(0, vec![Subtopology::new("0", [input])]);
    let description = TopologyDescription::new(vec![SubtopologyDescription::new(
        "0",
        vec![
            NodeDescription::source("KSTREAM-SOURCE-0000000000", [input])
                .with_successors(["KSTREAM-FLATMAPVALUES-0000000001"]),
            NodeDescription::processor("KSTREAM-FLATMAPVALUES-0000000001", Vec::<String>::new())
                .with_successors(["KSTREAM-AGGREGATE-0000000002"]),
            NodeDescription::processor("KSTREAM-AGGREGATE-0000000002", ["counts-store"])
                .with_successors(["KSTREAM-SINK-0000000003"]),
            NodeDescription::sink("KSTREAM-SINK-0000000003", Some("word-counts")),
        ],
    )])
    .with_global_store(
        NodeDescription::source("KSTREAM-SOURCE-0000000004", ["global-in"])
            .with_successors(["KTABLE-SOURCE-0000000005"]),
        NodeDescription::processor("KTABLE-SOURCE-0000000005", ["global-store"]),
    );
    (topology, description)
}

/// A member of `group` (its own process) over a recording transport.
fn start(b: &str, group: &str, streams: StreamsConfig) -> (StreamsGroupMember, Seen) {
    let mut client = ClientConfig::new(b).unwrap();
    client.client_id = "streams-topology-description".into();
    let seen = Recorder::new(TcpTransport::new(client));
    let process = StreamsProcess::new(uuid::Uuid::new_v4().to_string(), None);
    let member =
        StreamsGroupMember::start(seen.clone(), GroupConfig::new(group), streams, process).unwrap();
    (member, seen)
}

/// `group` as StreamsGroupDescribe v1 with `IncludeTopologyDescription` gives it.
async fn describe(b: &str, group: &str) -> DescribedGroup {
    let (t, _) = common::transport(b);
    let body = StreamsGroupDescribeRequest::default()
        .with_group_ids(vec![GroupId(StrBytes::from_string(group.into()))])
        .with_include_topology_description(true);
    let r = t
        .send(
            Target::Bootstrap,
            Request::StreamsGroupDescribe {
                body: Box::new(body),
                versions: 1..=1,
            },
            Duration::from_secs(15),
        )
        .await
        .expect("StreamsGroupDescribe answered");
    assert_eq!(r.version, 1);
    let ResponseBody::StreamsGroupDescribe(mut r) = r.body else {
        panic!("not a StreamsGroupDescribe answer: {:?}", r.body)
    };
    let g = r.groups.remove(0);
    assert_eq!(g.error_code, 0, "{:?}", g.error_message);
    g
}

/// The member's events until one `stop` accepts (or `T` passed), every one of them.
async fn events_until(
    member: &mut StreamsGroupMember,
    stop: impl Fn(&StreamsEvent) -> bool,
) -> Vec<StreamsEvent> {
    let deadline = Instant::now() + T;
    let mut events = Vec::new();
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, member.next_event()).await {
            Ok(Some(e)) => {
                let done = stop(&e);
                events.push(e);
                if done {
                    break;
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    events
}

/// The heartbeats were answered at v1, the version that carries `TopologyDescriptionRequired`.
fn heartbeats_at_v1(seen: &Seen) {
    let answered = seen.answered.lock().unwrap();
    let versions: Vec<&Result<i16, String>> = (answered.iter())
        .filter(|(a, _)| *a == Api::STREAMS_GROUP_HEARTBEAT)
        .map(|(_, v)| v)
        .collect();
    assert!(!versions.is_empty(), "no heartbeat sent");
    assert!(versions.iter().all(|v| **v == Ok(1)), "{versions:?}");
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_asks_the_member_pushes_and_describe_serves_it() {
    common::init_tracing();
    let Some(b) = broker() else { return };
    let (t, _) = common::transport(&b);
    let input = unique("topo-desc-in");
    common::create_topic(&*t, &input, 2).await;
    let group = unique("topo-desc");
    // Before any push: nothing stored for a group that does not exist yet is GROUP_ID_NOT_FOUND,
    // so only ask once the group exists.
    let (topology, description) = application(&input);
    let (mut member, seen) = start(
        &b,
        &group,
        StreamsConfig::new(topology).with_topology_description(description.clone()),
    );
    let events = events_until(&mut member, |e| {
        matches!(e, StreamsEvent::TopologyDescriptionPushed { .. })
    })
    .await;
    let pushed: Vec<_> = (events.iter())
        .filter_map(|e| match e {
            StreamsEvent::TopologyDescriptionPushed {
                topology_epoch,
                result,
            } => Some((*topology_epoch, result.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(pushed, [(0, Ok(()))], "events: {events:#?}");
    heartbeats_at_v1(&seen);
    assert_eq!(
        seen.answered_count(Api::STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE),
        1,
        "{:?}",
        seen.answered.lock().unwrap()
    );

    let g = describe(&b, &group).await;
    assert_eq!(
        DescriptionStatus::from_code(g.topology_description_status),
        DescriptionStatus::Available,
        "{g:#?}"
    );
    let served = g
        .topology_description
        .as_ref()
        .and_then(TopologyDescription::from_describe);
    assert_eq!(served.as_ref(), Some(&description), "{g:#?}");

    // Stored: the broker asks no more, the member pushes no more.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        seen.answered_count(Api::STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE),
        1
    );
    let s = member.handle().snapshot().await.expect("member running");
    assert_eq!(s.state, MemberState::Stable);
    member.handle().close(CloseOptions::Default).await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_without_a_description_pushes_nothing_and_runs_as_usual() {
    common::init_tracing();
    let Some(b) = broker() else { return };
    let (t, _) = common::transport(&b);
    let input = unique("topo-none-in");
    common::create_topic(&*t, &input, 2).await;
    let group = unique("topo-none");
    let (topology, _) = application(&input);
    let (mut member, seen) = start(&b, &group, StreamsConfig::new(topology));
    let events = events_until(
        &mut member,
        |e| matches!(e, StreamsEvent::TasksAssigned { added, .. } if added.active.len() == 2),
    )
    .await;
    assert!(
        events.iter().any(
            |e| matches!(e, StreamsEvent::TasksAssigned { added, .. } if added.active.len() == 2)
        ),
        "{events:#?}"
    );
    // Several heartbeats (500 ms interval), the first ones asking for the description.
    tokio::time::sleep(Duration::from_secs(3)).await;
    heartbeats_at_v1(&seen);
    assert!(seen.answered_count(Api::STREAMS_GROUP_HEARTBEAT) >= 3);
    assert_eq!(
        seen.answered_count(Api::STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE),
        0
    );
    let s = member.handle().snapshot().await.expect("member running");
    assert_eq!(s.state, MemberState::Stable);
    assert_eq!(s.tasks.active.len(), 2);
    let g = describe(&b, &group).await;
    assert_eq!(
        DescriptionStatus::from_code(g.topology_description_status),
        DescriptionStatus::NotStored,
        "{g:#?}"
    );
    assert!(g.topology_description.is_none());
    member.handle().close(CloseOptions::Default).await;
}
