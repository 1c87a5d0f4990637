#![cfg(feature = "sim")]
//! Smoke tests of the simulation: members reach Stable through the simulated coordinator.

use std::time::Duration;

use consumer_membership::config::GroupConfig;
use consumer_membership::sim::world::{SimConfig, World};

fn config(instance: Option<&str>) -> GroupConfig {
    let mut c = GroupConfig::new("g");
    c.instance_id = instance.map(String::from);
    c.session_timeout = Duration::from_secs(10);
    c.heartbeat_interval = Duration::from_secs(1);
    c.max_poll_interval = Duration::from_secs(20);
    c.request_timeout = Duration::from_secs(5);
    c
}

#[test]
fn three_members_reach_stable() {
    let mut w = World::new(
        SimConfig::new(1).with_topic("t", 6),
        std::time::Instant::now(),
    );
    let a = w.add_classic("a", config(Some("ia")), |_| {}).unwrap();
    let b = w.add_classic("b", config(None), |_| {}).unwrap();
    let c = w.add_classic("c", config(Some("ic")), |_| {}).unwrap();
    for h in [a, b, c] {
        w.subscribe(h, &["t"]);
    }
    let ok = w.run_until(|w| w.all_stable(), Duration::from_secs(60));
    w.run_for(Duration::from_secs(10));
    w.check(ok && w.all_stable(), "all stable");
    w.check(w.violations().is_empty(), format!("{:?}", w.violations()));
    let owned: usize = w.ownership().values().map(|v| v.len()).sum();
    w.check(
        owned == 6,
        format!("all partitions owned: {:?}", w.ownership()),
    );
    w.check(w.anomalies().is_empty(), format!("{:?}", w.anomalies()));
}

/// The simulated broker serves streams groups (KIP-1071): it advertises StreamsGroupHeartbeat
/// and StreamsGroupDescribe v0-1, and answers them from its streams-group model (an invalid
/// heartbeat INVALID_REQUEST, an unknown group GROUP_ID_NOT_FOUND), in streams response bodies.
#[test]
fn streams_group_requests_are_served() {
    use consumer_membership::messages::{
        StreamsGroupDescribeRequest, StreamsGroupHeartbeatRequest,
    };
    use consumer_membership::request::{Api, Request, RequestBody, ResponseBody};
    use consumer_membership::sim::ConnId;
    use consumer_membership::sim::coordinator::{CoordinatorConfig, SimCoordinator};
    use consumer_membership::sim::world::broker_versions_4x;
    use consumer_membership::transport::wire;
    use kafka_protocol::messages::GroupId;
    use kafka_protocol::protocol::StrBytes;

    let heartbeat = Request::StreamsGroupHeartbeat {
        body: Box::new(StreamsGroupHeartbeatRequest::default()),
        versions: 0..=1,
    };
    let (api, version, _) = wire::build(&heartbeat, &broker_versions_4x()).unwrap();
    assert_eq!((api, version), (Api::STREAMS_GROUP_HEARTBEAT, 1));

    let now = std::time::Instant::now();
    let mut c = SimCoordinator::new(CoordinatorConfig::new("g"), now);
    let describe = StreamsGroupDescribeRequest::default()
        .with_group_ids(vec![GroupId(StrBytes::from_static_str("app"))]);
    c.handle_request(
        ConnId(1),
        1,
        "c",
        1,
        RequestBody::StreamsGroupHeartbeat(StreamsGroupHeartbeatRequest::default()),
        now,
    );
    c.handle_request(
        ConnId(1),
        2,
        "c",
        0,
        RequestBody::StreamsGroupDescribe(describe),
        now,
    );
    let r = c.poll_response().expect("an answer");
    assert_eq!((r.correlation, r.version), (1, 1));
    let ResponseBody::StreamsGroupHeartbeat(body) = &r.body else {
        panic!("{r:?}")
    };
    // GroupCoordinatorService.throwIfStreamsGroupHeartbeatRequestIsInvalid: empty member id.
    assert_eq!(body.error_code, 42);
    let r = c.poll_response().expect("an answer");
    let ResponseBody::StreamsGroupDescribe(body) = &r.body else {
        panic!("{r:?}")
    };
    assert_eq!(body.groups.len(), 1);
    assert_eq!(body.groups[0].group_id.as_str(), "app");
    assert_eq!(body.groups[0].error_code, 69);
    assert!(c.poll_response().is_none());
}
