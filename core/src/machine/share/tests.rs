//! Sans-IO tests of the KIP-932 share member: identity, full and partial heartbeats, the
//! assignment applied at once, fencing, leaving, and the errors of its own.

use std::time::Duration;

use kafka_protocol::messages::share_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{
    RequestKind, ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse,
};
use uuid::Uuid;

use super::ShareMember;
use crate::config::GroupConfig;
use crate::error::{GroupError, TransportError, codes};
use crate::machine::TopicPartition;
use crate::machine::events::{CloseOptions, Event, MemberState, Reason};
use crate::machine::test_support::{
    self, ID, body, epoch_config, is_find_coordinator, is_metadata, picked, s,
};
use crate::member_id::MemberId;

const T: Uuid = Uuid::from_u128(0x7007);

type Harness = test_support::Harness<ShareMember>;

fn tp(p: i32) -> TopicPartition {
    TopicPartition::new("t", p)
}

fn ok(epoch: i32, target: Option<&[i32]>) -> ShareGroupHeartbeatResponse {
    ShareGroupHeartbeatResponse::default()
        .with_member_id(Some(s(ID)))
        .with_member_epoch(epoch)
        .with_heartbeat_interval_ms(1000)
        .with_assignment(target.map(|ps| {
            Assignment::default().with_topic_partitions(vec![
                TopicPartitions::default()
                    .with_topic_id(T)
                    .with_partitions(ps.to_vec()),
            ])
        }))
}

fn err(code: i16) -> ShareGroupHeartbeatResponse {
    ShareGroupHeartbeatResponse::default()
        .with_error_code(code)
        .with_member_id(Some(s(ID)))
        .with_member_epoch(-1)
}

fn names(b: &ShareGroupHeartbeatRequest) -> Option<Vec<String>> {
    (b.subscribed_topic_names.as_ref()).map(|ts| ts.iter().map(|t| t.0.to_string()).collect())
}

impl Harness {
    fn new() -> Self {
        let config = epoch_config("g", None);
        Self::start(|now| {
            ShareMember::with_member_id(config, MemberId::parse(ID).unwrap(), now).unwrap()
        })
    }

    /// Subscribes to "t": the lookup and the metadata prefetch are answered ("t" has id `T`).
    fn subscribed() -> Self {
        let mut h = Self::new();
        h.m.subscribe(["t".to_string()], h.now).unwrap();
        let out = h.drain();
        assert_eq!(out.len(), 2, "{out:#?}");
        assert!(
            is_find_coordinator(&out[0]) && is_metadata(&out[1]),
            "{out:#?}"
        );
        h.answer(&out[1], test_support::metadata_answer(&[("t", T, 4)]));
        h.answer_lookup(&out[0], "g");
        h
    }

    /// In the group at epoch 1 with t-0 and t-1; events so far discarded.
    fn joined() -> Self {
        let mut h = Self::subscribed();
        let (join, b) = h.expect_hb();
        assert_eq!((b.member_epoch, b.member_id.as_str()), (0, ID));
        assert_eq!(names(&b), Some(vec!["t".to_string()]));
        h.hb_answer(&join, ok(1, Some(&[0, 1])));
        assert_eq!(h.m.state(), MemberState::Stable);
        assert_eq!(h.m.assignment(), vec![tp(0), tp(1)]);
        h.nothing("a share member acknowledges nothing");
        h.events.clear();
        h
    }

    fn take_events(&mut self) -> Vec<Event> {
        self.drain();
        std::mem::take(&mut self.events)
    }
}

#[test]
fn an_instance_id_is_a_configuration_error() {
    let config = epoch_config("g", Some("i1"));
    let e = ShareMember::with_member_id(
        config,
        MemberId::parse(ID).unwrap(),
        crate::testutil::epoch(),
    )
    .unwrap_err();
    assert_eq!(e.key, "group.instance.id");
    // And a member id is needed up front (the core draws none).
    assert!(ShareMember::new(GroupConfig::new("g"), crate::testutil::epoch()).is_err());
}

#[test]
fn joins_full_then_sends_the_subscription_only_when_it_changed() {
    let mut h = Harness::joined();
    h.advance(Duration::from_secs(1));
    let (hb, b) = h.expect_hb();
    assert_eq!((b.member_epoch, b.member_id.as_str()), (1, ID));
    assert_eq!(
        names(&b),
        None,
        "partial: the broker knows the subscription"
    );
    assert_eq!(b.rack_id, None);
    h.hb_answer(&hb, ok(1, None));
    h.m.subscribe(["t".to_string(), "u".to_string()], h.now)
        .unwrap();
    let out = h.drain();
    let hb = out
        .iter()
        .find(|o| !is_metadata(o))
        .expect("the changed subscription goes out at once");
    let b = <ShareMember as test_support::Heartbeats>::heartbeat_of(hb);
    assert_eq!(names(&b), Some(vec!["t".to_string(), "u".to_string()]));
    assert_eq!(b.member_epoch, 1);
}

#[test]
fn a_new_target_is_applied_at_once_without_a_ticket() {
    let mut h = Harness::joined();
    h.advance(Duration::from_secs(1));
    let (hb, _) = h.expect_hb();
    h.hb_answer(&hb, ok(2, Some(&[1, 2])));
    let events = h.take_events();
    let revoked: Vec<Vec<TopicPartition>> =
        picked!(events, Event::Revoked { partitions } => partitions.clone());
    let added: Vec<Vec<TopicPartition>> =
        picked!(events, Event::Assigned { added, .. } => added.clone());
    assert_eq!(revoked, vec![vec![tp(0)]], "{events:?}");
    assert_eq!(added, vec![vec![tp(2)]], "{events:?}");
    assert!(!events.iter().any(|e| matches!(e, Event::Revoking { .. })));
    assert_eq!(h.m.state(), MemberState::Stable);
    assert_eq!(h.m.assignment(), vec![tp(1), tp(2)]);
    assert_eq!(h.m.epoch(), 2);
}

#[test]
fn fencing_loses_the_partitions_and_rejoins_with_the_same_id_at_epoch_0() {
    for code in [
        codes::FENCED_MEMBER_EPOCH,
        codes::UNKNOWN_MEMBER_ID,
        codes::GROUP_ID_NOT_FOUND,
    ] {
        let mut h = Harness::joined();
        h.advance(Duration::from_secs(1));
        let (hb, _) = h.expect_hb();
        h.hb_answer(&hb, err(code));
        // The rejoin goes out at once.
        let (_, b) = h.expect_hb();
        let events = std::mem::take(&mut h.events);
        assert!(
            events.iter().any(|e| matches!(e, Event::Lost { .. })),
            "{code}: {events:?}"
        );
        assert_eq!((b.member_epoch, b.member_id.as_str()), (0, ID), "{code}");
        assert_eq!(names(&b), Some(vec!["t".to_string()]), "{code}: full");
        assert_eq!(h.m.member_id(), ID);
    }
}

/// The broker echoes the whole assignment only for a full heartbeat (epoch 0 or with the
/// subscription: `isFullRequest`) or a change; after a heartbeat lost in the transport the next
/// one is full, so an assignment its answer carried comes again.
#[test]
fn the_heartbeat_after_a_lost_one_is_full() {
    let mut h = Harness::joined();
    h.advance(Duration::from_secs(1));
    let (hb, _) = h.expect_hb();
    h.m.handle_response(hb.id, Err(TransportError::Closed), h.now);
    h.advance(Duration::from_secs(2));
    let out = h.drain();
    let hb = out
        .iter()
        .find(|o| !is_find_coordinator(o) && !is_metadata(o));
    let hb = match hb {
        Some(hb) => hb.clone(),
        None => {
            // The coordinator is looked up again first.
            let fc = out.iter().find(|o| is_find_coordinator(o)).unwrap().clone();
            h.answer_lookup(&fc, "g");
            h.expect_hb().0
        }
    };
    let b = <ShareMember as test_support::Heartbeats>::heartbeat_of(&hb);
    assert_eq!(b.member_epoch, 1, "the member keeps its epoch");
    assert_eq!(
        names(&b),
        Some(vec!["t".to_string()]),
        "full after a failure"
    );
}

#[test]
fn close_leaves_with_epoch_minus_one_also_before_the_first_answer() {
    // In the group: the partitions are released, then the leave.
    let mut h = Harness::joined();
    h.m.close(CloseOptions::Default, h.now);
    let (leave, b) = h.expect_hb();
    assert_eq!((b.member_epoch, b.member_id.as_str()), (-1, ID));
    let events = h.take_events();
    assert!(
        events.iter().any(|e| matches!(e, Event::Revoked { .. })),
        "{events:?}"
    );
    h.hb_answer(&leave, ok(-1, None));
    assert_eq!(h.m.state(), MemberState::Closed);
    // Before the first answer: the join is in flight, the leave goes out behind it.
    let mut h = Harness::subscribed();
    let (_join, _) = h.expect_hb();
    h.m.close(CloseOptions::Default, h.now);
    let (_, b) = h.expect_hb();
    assert_eq!((b.member_epoch, b.member_id.as_str()), (-1, ID));
    // A member without an instance id that remains in the group sends nothing (KIP-1092):
    // the coordinator expires it after the session timeout.
    let mut h = Harness::joined();
    h.m.close(CloseOptions::RemainInGroup, h.now);
    h.nothing("no leave for a dynamic member that remains");
    assert_eq!(h.m.state(), MemberState::Closed);
}

#[test]
fn group_id_not_found_answering_a_join_is_terminal_and_typed() {
    let mut h = Harness::subscribed();
    let (join, _) = h.expect_hb();
    h.hb_answer(
        &join,
        err(codes::GROUP_ID_NOT_FOUND).with_error_message(Some(s("Group g is not a share group."))),
    );
    assert_eq!(h.m.state(), MemberState::Fatal);
    assert!(
        matches!(h.m.fatal_error(), Some(GroupError::GroupIdNotFound { message: Some(m), .. }) if m.contains("not a share group")),
        "{:?}",
        h.m.fatal_error()
    );
}

#[test]
fn unsupported_version_stops_with_a_typed_error() {
    let mut h = Harness::subscribed();
    let (join, _) = h.expect_hb();
    h.hb_answer(&join, err(codes::UNSUPPORTED_VERSION));
    assert_eq!(
        h.m.fatal_error(),
        Some(&GroupError::ShareProtocolUnsupported)
    );
}

#[test]
fn a_poll_timeout_leaves_and_the_next_poll_rejoins_with_the_same_id() {
    let mut h = Harness::joined();
    for _ in 0..31 {
        h.advance(Duration::from_secs(1));
        for out in h.drain() {
            if let RequestKind::ShareGroupHeartbeat(b) = body(&out) {
                let epoch = if b.member_epoch < 0 { -1 } else { 1 };
                h.hb_answer(&out, ok(epoch, None));
            }
        }
    }
    assert_eq!(h.m.state(), MemberState::Stale);
    let events = h.take_events();
    assert!(
        events.iter().any(|e| matches!(
            e,
            Event::Lost {
                reason: Reason::PollTimeout,
                ..
            }
        ) || matches!(e, Event::Revoked { .. })),
        "{events:?}"
    );
    h.m.poll(h.now);
    let (_, b) = h.expect_hb();
    assert_eq!((b.member_epoch, b.member_id.as_str()), (0, ID));
}
