//! Sans-IO tests of the share consumer: leaders looked up, fetching paced by the application,
//! implicit acknowledgement on the next round, and the close order (sessions, then the leave).

use bytes::Bytes;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::share_fetch_response as sf;
use kafka_protocol::messages::share_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{
    BrokerId, MetadataResponse, RequestKind, ResponseKind, ShareAcknowledgeResponse,
    ShareFetchRequest, ShareFetchResponse, ShareGroupHeartbeatResponse, TopicName,
};
use uuid::Uuid;

use super::session::{AckMode, AcknowledgeType, ShareFetchSettings};
use super::{ShareConsumer, ShareEvent};
use crate::machine::events::{CloseOptions, Event, MemberState};
use crate::machine::test_support::{
    self, ID, body, epoch_config, is_find_coordinator, is_metadata, s,
};
use crate::member_id::MemberId;
use crate::request::{Outbound, Target};

const T: Uuid = Uuid::from_u128(0x5a5a);
/// t-0 is led by node 2, t-1 by node 3.
const LEADERS: [(i32, i32); 2] = [(0, 2), (1, 3)];

type Harness = test_support::Harness<ShareConsumer>;

/// A Metadata answer for "t" (id `T`) with brokers 1-3 and the partition leaders `LEADERS`.
fn metadata() -> ResponseKind {
    let broker = |n: i32| {
        MetadataResponseBroker::default()
            .with_node_id(BrokerId(n))
            .with_host(s("h"))
            .with_port(9090 + n)
    };
    let partitions = (LEADERS.iter())
        .map(|(p, l)| {
            MetadataResponsePartition::default()
                .with_partition_index(*p)
                .with_leader_id(BrokerId(*l))
        })
        .collect();
    let topic = MetadataResponseTopic::default()
        .with_name(Some(TopicName(s("t"))))
        .with_topic_id(T)
        .with_partitions(partitions);
    ResponseKind::Metadata(
        MetadataResponse::default()
            .with_brokers((1..=3).map(broker).collect())
            .with_topics(vec![topic]),
    )
}

fn fetch_of(out: &Outbound) -> ShareFetchRequest {
    match body(out) {
        RequestKind::ShareFetch(r) => r,
        other => panic!("expected a ShareFetch, got {other:?}"),
    }
}

fn node_of(out: &Outbound) -> i32 {
    match &out.target {
        Target::Node(b) => b.node_id,
        other => panic!("a share request goes to a leader, not {other}"),
    }
}

/// The ShareFetch answer of one partition: offsets `first..=last` acquired (delivery 1).
fn records(partition: i32, first: i64, last: i64) -> ResponseKind {
    let data = sf::PartitionData::default()
        .with_partition_index(partition)
        .with_records(Some(Bytes::from_static(b"records")))
        .with_acquired_records(vec![
            sf::AcquiredRecords::default()
                .with_first_offset(first)
                .with_last_offset(last)
                .with_delivery_count(1),
        ]);
    ResponseKind::ShareFetch(ShareFetchResponse::default().with_responses(vec![
        sf::ShareFetchableTopicResponse::default()
            .with_topic_id(T)
            .with_partitions(vec![data]),
    ]))
}

/// (partition, first, last, types) of every acknowledgement batch a ShareFetch carries.
fn acks(r: &ShareFetchRequest) -> Vec<(i32, i64, i64, Vec<i8>)> {
    (r.topics.iter())
        .flat_map(|t| &t.partitions)
        .flat_map(|p| {
            (p.acknowledgement_batches.iter()).map(|b| {
                let types = b.acknowledge_types.clone();
                (p.partition_index, b.first_offset, b.last_offset, types)
            })
        })
        .collect()
}

impl Harness {
    /// Subscribed to "t" and in the group at epoch 1 with t-0 and t-1, both leaders known:
    /// nothing fetched yet.
    fn assigned(mode: AckMode) -> Self {
        let mut h = Self::start(|now| {
            let config = epoch_config("g", None).with_member_id(MemberId::parse(ID).unwrap());
            ShareConsumer::new(config, ShareFetchSettings::default(), mode, now).unwrap()
        });
        h.m.subscribe(["t".to_string()], h.now).unwrap();
        let out = h.drain();
        assert!(
            is_find_coordinator(&out[0]) && is_metadata(&out[1]),
            "{out:#?}"
        );
        h.answer(&out[1], test_support::metadata_answer(&[("t", T, 2)]));
        h.answer_lookup(&out[0], "g");
        let join = h.one();
        let assignment = Assignment::default().with_topic_partitions(vec![
            TopicPartitions::default()
                .with_topic_id(T)
                .with_partitions(vec![0, 1]),
        ]);
        let answer = ShareGroupHeartbeatResponse::default()
            .with_member_id(Some(s(ID)))
            .with_member_epoch(1)
            .with_heartbeat_interval_ms(5000)
            .with_assignment(Some(assignment));
        h.answer(&join, ResponseKind::ShareGroupHeartbeat(answer));
        let lookup = h.one();
        assert!(
            is_metadata(&lookup),
            "the leaders are looked up: {lookup:#?}"
        );
        assert_eq!(lookup.target, Target::Bootstrap);
        h.answer(&lookup, metadata());
        h.nothing("no records are fetched before the application asks");
        h
    }

    /// `fetch_more`, and the ShareFetch requests it sends, by leader.
    fn round(&mut self) -> Vec<Outbound> {
        self.m.fetch_more(self.now);
        let mut out = self.drain();
        out.sort_by_key(node_of);
        out
    }

    fn records_events(&mut self) -> Vec<(String, i32, i64, i64)> {
        self.collect_events();
        (self.events.drain(..))
            .filter_map(|e| match e {
                ShareEvent::Records { topic, records } => {
                    let r = records.acquired[0];
                    Some((topic, records.partition.partition, r.first, r.last))
                }
                _ => None,
            })
            .collect()
    }
}

#[test]
fn fetches_from_each_leader_only_when_the_application_asks() {
    let mut h = Harness::assigned(AckMode::Explicit);
    let fetches = h.round();
    assert_eq!(fetches.iter().map(node_of).collect::<Vec<_>>(), vec![2, 3]);
    for f in &fetches {
        let r = fetch_of(f);
        assert_eq!(r.member_id.as_deref(), Some(ID));
        assert_eq!(r.share_session_epoch, 0, "each session opens at epoch 0");
    }
    h.answer(&fetches[0], records(0, 10, 14));
    assert_eq!(h.records_events(), vec![("t".to_string(), 0, 10, 14)]);
    // Records arrived: the round is over; node 3's fetch still runs, node 2 is not asked again.
    h.nothing("no new fetch until the application asks again");
    h.answer(
        &fetches[1],
        ResponseKind::ShareFetch(ShareFetchResponse::default()),
    );
    h.nothing("still no new fetch");
    // The application acknowledges: the acknowledgement rides on the next round.
    let t0 = super::SharePartition::new(T, 0);
    h.m.acknowledge(t0, 10, 14, AcknowledgeType::Accept)
        .unwrap();
    let fetches = h.round();
    assert_eq!(fetches.len(), 2, "{fetches:#?}");
    let to_2 = fetch_of(&fetches[0]);
    assert_eq!(to_2.share_session_epoch, 1);
    assert_eq!(acks(&to_2), vec![(0, 10, 14, vec![1])]);
    h.answer(&fetches[0], records(0, 15, 15));
    h.collect_events();
    let acknowledged: Vec<_> = (h.events.iter())
        .filter_map(|e| match e {
            ShareEvent::Acknowledged(a) => Some((a.first, a.last, a.result.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(acknowledged, vec![(10, 14, Ok(()))]);
}

#[test]
fn implicit_mode_accepts_a_round_with_the_next_one() {
    let mut h = Harness::assigned(AckMode::Implicit);
    let fetches = h.round();
    h.answer(&fetches[0], records(0, 0, 4));
    assert_eq!(h.records_events().len(), 1);
    h.answer(
        &fetches[1],
        ResponseKind::ShareFetch(ShareFetchResponse::default()),
    );
    h.nothing("the application has not finished with the records");
    let fetches = h.round();
    assert_eq!(acks(&fetch_of(&fetches[0])), vec![(0, 0, 4, vec![1])]);
    assert_eq!(acks(&fetch_of(&fetches[1])), vec![]);
}

#[test]
fn a_moved_leader_is_looked_up_again() {
    let mut h = Harness::assigned(AckMode::Explicit);
    let fetches = h.round();
    let moved = sf::PartitionData::default()
        .with_partition_index(0)
        .with_error_code(6); // NOT_LEADER_OR_FOLLOWER
    let answer = ShareFetchResponse::default().with_responses(vec![
        sf::ShareFetchableTopicResponse::default()
            .with_topic_id(T)
            .with_partitions(vec![moved]),
    ]);
    h.answer(&fetches[0], ResponseKind::ShareFetch(answer));
    let out = h.drain();
    let lookups: Vec<_> = out.iter().filter(|o| is_metadata(o)).collect();
    assert_eq!(lookups.len(), 1, "{out:#?}");
    assert_eq!(lookups[0].target, Target::Bootstrap);
}

#[test]
fn close_ends_the_sessions_with_their_acknowledgements_before_the_leave() {
    let mut h = Harness::assigned(AckMode::Explicit);
    let fetches = h.round();
    h.answer(&fetches[0], records(0, 0, 2));
    h.answer(
        &fetches[1],
        ResponseKind::ShareFetch(ShareFetchResponse::default()),
    );
    let t0 = super::SharePartition::new(T, 0);
    h.m.acknowledge(t0, 0, 2, AcknowledgeType::Release).unwrap();
    h.m.close(CloseOptions::Default, h.now);
    let closes = h.drain();
    let mut to: Vec<(i32, i32, usize)> = (closes.iter())
        .map(|o| match body(o) {
            RequestKind::ShareAcknowledge(r) => {
                let batches = (r.topics.iter()).flat_map(|t| &t.partitions);
                (node_of(o), r.share_session_epoch, batches.count())
            }
            other => panic!("only the sessions' closes go first, not {other:?}"),
        })
        .collect();
    to.sort();
    assert_eq!(to, vec![(2, -1, 1), (3, -1, 0)]);
    h.answer(
        &closes[0],
        ResponseKind::ShareAcknowledge(ShareAcknowledgeResponse::default()),
    );
    h.nothing("the leave waits for every session's close");
    h.answer(
        &closes[1],
        ResponseKind::ShareAcknowledge(ShareAcknowledgeResponse::default()),
    );
    let (leave, b) = h.expect_leave();
    assert_eq!((b.0.as_str(), b.1), (ID, -1));
    h.answer(
        &leave,
        ResponseKind::ShareGroupHeartbeat(
            ShareGroupHeartbeatResponse::default().with_member_epoch(-1),
        ),
    );
    h.collect_events();
    assert_eq!(h.m.state(), MemberState::Closed);
    assert!(
        matches!(h.events.last(), Some(ShareEvent::Member(Event::Closed))),
        "{:?}",
        h.events
    );
}

#[test]
fn close_before_joining_still_leaves_with_the_same_id() {
    let mut h = Harness::start(|now| {
        let config = epoch_config("g", None).with_member_id(MemberId::parse(ID).unwrap());
        ShareConsumer::new(
            config,
            ShareFetchSettings::default(),
            AckMode::Explicit,
            now,
        )
        .unwrap()
    });
    h.m.subscribe(["t".to_string()], h.now).unwrap();
    let out = h.drain();
    h.answer_lookup(&out[0], "g");
    let join = h.one();
    h.m.close(CloseOptions::Default, h.now);
    // No session was opened: the leave goes at once, behind the join on its connection.
    let (leave, (id, epoch)) = h.expect_leave();
    assert_eq!((id.as_str(), epoch), (ID, -1));
    assert_eq!(leave.target, join.target);
}

impl Harness {
    /// Expects one request, a ShareGroupHeartbeat, and gives its member id and epoch.
    fn expect_leave(&mut self) -> (Outbound, (String, i32)) {
        let out = self.drain();
        let hb = (out.iter())
            .find(|o| matches!(body(o), RequestKind::ShareGroupHeartbeat(_)))
            .unwrap_or_else(|| panic!("expected the leave: {out:#?}"))
            .clone();
        let RequestKind::ShareGroupHeartbeat(b) = body(&hb) else {
            unreachable!()
        };
        (hb, (b.member_id.to_string(), b.member_epoch))
    }
}
