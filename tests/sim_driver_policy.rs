#![cfg(feature = "sim")]
//! The test-only Java reset policy (`Member::set_java_reset_policy`, KAFKA-20985) reaches the
//! classic member the async driver runs: through the public API only (`GroupMember::start_member`
//! with a `Member` the test adjusted, and `GroupMember::start` for the default), over the
//! in-memory transport and a one-member "broker".
//!
//! A static member skips the LeaveGroup (an `unsubscribe()`, or a missed `max.poll.interval.ms`)
//! and joins again. With the policy it wipes its member id, as the Java client does, and the
//! JoinGroup carries `""` + the instance id (the join a broker may let replace the member's own
//! registration); without it (this crate's policy) the JoinGroup carries the id the broker gave
//! it. The recorded JoinGroup requests tell which policy the member ran.

use std::sync::Arc;
use std::time::{Duration, Instant};

use consumer_membership::config::{GroupConfig, GroupProtocol};
use consumer_membership::driver::GroupMember;
use consumer_membership::machine::TopicPartition;
use consumer_membership::machine::classic::subscription::Assignment;
use consumer_membership::machine::events::{CloseOptions, Event, MemberState};
use consumer_membership::machine::member::Member;
use consumer_membership::request::RequestBody;
use consumer_membership::transport::MemoryTransport;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{
    BrokerId, FindCoordinatorResponse, HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse,
    RequestKind, ResponseKind, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;

const INSTANCE: &str = "i1";

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_owned())
}

/// A coordinator for one member of group "g": it names a static member `i1-<n>` on a join with
/// `""` (as a broker names it `<group.instance.id>-<uuid>`), keeps a known id, makes someone
/// else the leader (so the member syncs as a follower) and assigns `t-0`.
fn broker() -> MemoryTransport {
    let mut generation = 0;
    let mut named = 0;
    MemoryTransport::new(move |_: &_, body: RequestBody, version: i16| {
        Ok(match body {
            RequestBody::Kafka(RequestKind::FindCoordinator(r)) => {
                let c = |key: StrBytes| {
                    Coordinator::default()
                        .with_key(key)
                        .with_node_id(BrokerId(1))
                        .with_host(s("127.0.0.1"))
                        .with_port(9092)
                };
                let mut answer = FindCoordinatorResponse::default();
                if version >= 4 {
                    answer.coordinators = r.coordinator_keys.into_iter().map(c).collect();
                } else {
                    answer = answer
                        .with_node_id(BrokerId(1))
                        .with_host(s("127.0.0.1"))
                        .with_port(9092);
                }
                ResponseKind::FindCoordinator(answer)
            }
            RequestBody::Kafka(RequestKind::JoinGroup(r)) => {
                assert_eq!(r.group_instance_id.as_deref(), Some(INSTANCE));
                let member_id = if r.member_id.is_empty() {
                    named += 1;
                    format!("{INSTANCE}-{named}")
                } else {
                    r.member_id.to_string()
                };
                generation += 1;
                ResponseKind::JoinGroup(
                    JoinGroupResponse::default()
                        .with_generation_id(generation)
                        .with_protocol_type(Some(s("consumer")))
                        .with_protocol_name(Some(s("range")))
                        .with_leader(s("leader-elsewhere"))
                        .with_member_id(s(&member_id)),
                )
            }
            RequestBody::Kafka(RequestKind::SyncGroup(_)) => ResponseKind::SyncGroup(
                SyncGroupResponse::default()
                    .with_protocol_type(Some(s("consumer")))
                    .with_protocol_name(Some(s("range")))
                    .with_assignment(
                        Assignment {
                            partitions: vec![TopicPartition::new("t", 0)],
                            user_data: None,
                        }
                        .encode(),
                    ),
            ),
            RequestBody::Kafka(RequestKind::Heartbeat(_)) => {
                ResponseKind::Heartbeat(HeartbeatResponse::default())
            }
            // The driver's check that the subscribed topic exists: it does.
            RequestBody::Kafka(RequestKind::Metadata(_)) => ResponseKind::Metadata(
                kafka_protocol::messages::MetadataResponse::default().with_topics(vec![
                    kafka_protocol::messages::metadata_response::MetadataResponseTopic::default()
                        .with_name(Some(s("t").into()))
                        .with_topic_id(uuid::Uuid::from_u128(1)),
                ]),
            ),
            RequestBody::Kafka(RequestKind::LeaveGroup(r)) => ResponseKind::LeaveGroup(
                LeaveGroupResponse::default().with_members(
                    r.members
                        .into_iter()
                        .map(|m| {
                            MemberResponse::default()
                                .with_member_id(m.member_id)
                                .with_group_instance_id(m.group_instance_id)
                        })
                        .collect(),
                ),
            ),
            other => panic!("the test broker does not answer {other:?}"),
        })
    })
}

/// The member's configuration (no reset policy: that is no config's business).
fn config() -> GroupConfig {
    GroupConfig::new("g")
        .with_instance_id(INSTANCE)
        .with_protocol(GroupProtocol::Classic)
        .with_session_timeout(Duration::from_secs(10))
        .with_heartbeat_interval(Duration::from_millis(200))
        .with_request_timeout(Duration::from_secs(5))
        .with_seed(20985)
}

/// How a test starts the member under test.
#[derive(Clone, Copy)]
enum Start {
    /// `GroupMember::start_member` with `set_java_reset_policy(on)`.
    Policy(bool),
    /// Plain `GroupMember::start`: the policy as every user gets it.
    Default,
}

fn start(t: &Arc<MemoryTransport>, config: GroupConfig, how: Start) -> GroupMember {
    match how {
        Start::Policy(on) => {
            let mut member = Member::new(config, Instant::now()).expect("valid config");
            member.set_java_reset_policy(on);
            GroupMember::start_member(t.clone(), member)
        }
        Start::Default => GroupMember::start(t.clone(), config).expect("valid config"),
    }
}

/// The member ids the recorded JoinGroup requests carried, in order.
fn join_member_ids(t: &MemoryTransport) -> Vec<String> {
    t.sent()
        .into_iter()
        .filter_map(|(_, body, _)| match body {
            RequestBody::Kafka(RequestKind::JoinGroup(j)) => Some(j.member_id.to_string()),
            _ => None,
        })
        .collect()
}

fn leave_groups(t: &MemoryTransport) -> usize {
    t.sent()
        .iter()
        .filter(|(_, body, _)| matches!(body, RequestBody::Kafka(RequestKind::LeaveGroup(_))))
        .count()
}

/// Waits (polling, as the application does) for the next `Event::Assigned`.
async fn assigned(m: &mut GroupMember) {
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match m.next_event().await {
                Some(Event::Assigned { .. }) => return,
                Some(Event::Fatal(e)) => panic!("member stopped: {e}"),
                Some(_) => {}
                None => panic!("the member's task ended"),
            }
        }
    })
    .await
    .expect("assigned within 20 s");
}

/// A static member joins, leaves its subscription (no LeaveGroup), subscribes again; returns the
/// member ids of its JoinGroups and its final member id.
async fn unsubscribe_and_rejoin(how: Start) -> (Vec<String>, String, usize) {
    let t = Arc::new(broker());
    let mut m = start(&t, config(), how);
    m.subscribe(["t".to_string()]).await.expect("subscribed");
    assigned(&mut m).await;
    m.unsubscribe().await.unwrap();
    m.subscribe(["t".to_string()])
        .await
        .expect("subscribed again");
    assigned(&mut m).await;
    let member_id = m.snapshot().await.expect("running").member_id;
    m.close(CloseOptions::Default).await;
    (join_member_ids(&t), member_id, leave_groups(&t))
}

#[tokio::test]
async fn java_reset_policy_reaches_the_driver_member_unsubscribe() {
    let (joins, member_id, leaves) = unsubscribe_and_rejoin(Start::Policy(true)).await;
    assert_eq!(
        joins,
        ["", ""],
        "with the Java policy the rejoin after a suppressed leave carries an empty member id"
    );
    assert_eq!(member_id, "i1-2", "the broker named the member again");
    assert_eq!(leaves, 0, "a static member sends no LeaveGroup");
}

/// This crate's policy: the rejoin after the suppressed leave carries the kept member id.
async fn unsubscribe_and_rejoin_keeps_the_member_id(how: Start) {
    let (joins, member_id, leaves) = unsubscribe_and_rejoin(how).await;
    assert_eq!(
        joins,
        ["", "i1-1"],
        "without the Java policy the rejoin carries the kept member id (KAFKA-20985)"
    );
    assert_eq!(member_id, "i1-1");
    assert_eq!(leaves, 0, "a static member sends no LeaveGroup");
}

#[tokio::test]
async fn crate_policy_through_the_driver_keeps_the_member_id_unsubscribe() {
    unsubscribe_and_rejoin_keeps_the_member_id(Start::Policy(false)).await;
}

/// The same through the driver's clock: the application misses `max.poll.interval.ms` (the
/// member leaves without LeaveGroup) and its next poll rejoins.
async fn poll_timeout_and_rejoin(java_policy: bool) -> Vec<String> {
    let t = Arc::new(broker());
    let c = config().with_max_poll_interval(Duration::from_millis(1500));
    let mut m = start(&t, c, Start::Policy(java_policy));
    m.subscribe(["t".to_string()]).await.expect("subscribed");
    assigned(&mut m).await;
    // Not polling (no next_event) for longer than max.poll.interval.ms.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let state = m.snapshot().await.expect("running").state;
    assert_eq!(state, MemberState::PollExpired);
    assigned(&mut m).await;
    m.close(CloseOptions::Default).await;
    assert_eq!(leave_groups(&t), 0, "a static member sends no LeaveGroup");
    join_member_ids(&t)
}

#[tokio::test]
async fn java_reset_policy_reaches_the_driver_member_poll_timeout() {
    assert_eq!(poll_timeout_and_rejoin(true).await, ["", ""]);
}

#[tokio::test]
async fn crate_policy_through_the_driver_keeps_the_member_id_poll_timeout() {
    assert_eq!(poll_timeout_and_rejoin(false).await, ["", "i1-1"]);
}

/// A member started from a `GroupConfig` alone (no way to ask for the policy) runs this
/// crate's policy.
#[tokio::test]
async fn the_policy_is_off_unless_asked_for() {
    unsubscribe_and_rejoin_keeps_the_member_id(Start::Default).await;
}
