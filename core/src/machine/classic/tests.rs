//! Sans-IO tests of the classic member: identity rules, the error gate, rebalance steps.

use std::time::Duration;

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{
    HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse, RequestKind, ResponseKind,
    SyncGroupResponse,
};

use super::ClassicMember;
use super::subscription::{Assignment, Subscription};
use crate::config::GroupConfig;
use crate::error::{GroupError, codes};
use crate::machine::TopicPartition;
use crate::machine::events::{CloseOptions, CommitError, CommitOffset, Event, MemberState, Reason};
use crate::machine::test_support::{
    self, base_config, body, commit_answer, find_coordinator_answer, is_find_coordinator,
    is_metadata, metadata_answer, picked, s,
};
use crate::request::{Outbound, Request, RequestBody, Response, ResponseBody};

type Harness = test_support::Harness<ClassicMember>;

fn config(instance: Option<&str>) -> GroupConfig {
    base_config("g", instance)
}

impl Harness {
    fn with_config(config: GroupConfig) -> Self {
        Self::start(|now| ClassicMember::new(config, now).unwrap())
    }

    fn new(instance: Option<&str>) -> Self {
        Self::with_config(config(instance))
    }

    fn find_coordinator(&mut self) {
        self.find_coordinator_at(1);
    }

    /// Subscribes to "t" and answers the coordinator lookup.
    fn subscribe_to_t(&mut self) {
        self.m.subscribe(["t".to_string()], self.now).unwrap();
        self.find_coordinator();
    }

    /// Expects a JoinGroup; returns it with the member id it carries.
    fn expect_join(&mut self) -> (Outbound, String) {
        let out = self.one();
        let RequestKind::JoinGroup(j) = body(&out) else {
            panic!("expected JoinGroup, got {out:?}")
        };
        (out, j.member_id.to_string())
    }

    fn join_ok(&mut self, out: &Outbound, member: &str, generation: i32, leader: &str) {
        let r = JoinGroupResponse::default()
            .with_generation_id(generation)
            .with_protocol_type(Some(s("consumer")))
            .with_protocol_name(Some(s("range")))
            .with_leader(s(leader))
            .with_member_id(s(member));
        self.answer(out, ResponseKind::JoinGroup(r));
    }

    fn sync_ok(&mut self, partitions: &[(&str, i32)]) {
        let out = self.one();
        assert!(matches!(body(&out), RequestKind::SyncGroup(_)), "{out:?}");
        let a = Assignment {
            partitions: partitions
                .iter()
                .map(|(t, p)| TopicPartition::new(*t, *p))
                .collect(),
            user_data: None,
        };
        self.answer(
            &out,
            ResponseKind::SyncGroup(
                SyncGroupResponse::default()
                    .with_protocol_type(Some(s("consumer")))
                    .with_protocol_name(Some(s("range")))
                    .with_assignment(a.encode()),
            ),
        );
    }

    /// Subscribe to "t" and go all the way to Stable as follower `member` in `generation`.
    fn stable(instance: Option<&str>, member: &str) -> Self {
        let mut h = Self::new(instance);
        h.subscribe_to_t();
        let (join, _) = h.expect_join();
        h.join_ok(&join, member, 1, "leader-other");
        h.sync_ok(&[("t", 0), ("t", 1)]);
        assert_eq!(h.m.state(), MemberState::Stable);
        h.drain();
        h
    }

    fn heartbeat(&mut self) -> Outbound {
        self.advance(Duration::from_secs(1));
        let out = self.one();
        assert!(matches!(body(&out), RequestKind::Heartbeat(_)), "{out:?}");
        out
    }

    fn heartbeat_answer(&mut self, out: &Outbound, code: i16) {
        self.answer(
            out,
            ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(code)),
        );
    }

    fn take_events(&mut self) -> Vec<Event> {
        self.drain();
        std::mem::take(&mut self.events)
    }

    /// Commits t-`partition` and expects the lease's local refusal; returns the events.
    fn commit_refused_by_the_lease(&mut self, partition: i32) -> Vec<Event> {
        let partition = TopicPartition::new("t", partition);
        let c = self
            .m
            .commit(vec![CommitOffset::new(partition, 7)], self.now);
        let events = self.take_events();
        assert_eq!(
            commit_result(&events, c),
            Some(&CommitError::LeaseExpired),
            "{events:?}"
        );
        events
    }
}

#[test]
fn static_member_joins_syncs_and_heartbeats() {
    let mut h = Harness::new(Some("i1"));
    h.subscribe_to_t();
    let (join, id) = h.expect_join();
    assert_eq!(id, "", "first join of a static member carries no member id");
    let RequestKind::JoinGroup(j) = body(&join) else {
        unreachable!()
    };
    assert_eq!(j.group_instance_id.as_deref(), Some("i1"));
    assert_eq!(j.protocol_type.as_str(), "consumer");
    assert_eq!(
        j.protocols
            .iter()
            .map(|p| p.name.to_string())
            .collect::<Vec<_>>(),
        vec!["range", "cooperative-sticky"]
    );
    let sub = Subscription::decode(&j.protocols[0].metadata).unwrap();
    assert_eq!(sub.topics, vec!["t".to_string()]);
    assert_eq!(
        join.timeout,
        Duration::from_secs(35),
        "rebalance timeout + 5 s"
    );
    h.join_ok(&join, "i1-abc", 1, "other");
    h.sync_ok(&[("t", 0)]);
    let events = h.take_events();
    assert!(events.iter().any(|e| matches!(e, Event::Assigned { added, generation: 1, .. } if added == &vec![TopicPartition::new("t", 0)])), "{events:?}");
    let hb = h.heartbeat();
    let RequestKind::Heartbeat(b) = body(&hb) else {
        unreachable!()
    };
    assert_eq!(
        (
            b.generation_id,
            b.member_id.as_str(),
            b.group_instance_id.as_deref()
        ),
        (1, "i1-abc", Some("i1"))
    );
    // One heartbeat in flight at a time.
    h.advance(Duration::from_secs(5));
    assert!(h.drain().is_empty());
    h.heartbeat_answer(&hb, 0);
    assert!(!h.drain().is_empty(), "the next heartbeat is due already");
}

#[test]
fn static_unsubscribe_keeps_the_member_id_and_rejoins_with_it() {
    let mut h = Harness::stable(Some("i1"), "i1-abc");
    h.m.unsubscribe(h.now);
    assert!(
        h.drain().is_empty(),
        "a static member sends no LeaveGroup on unsubscribe"
    );
    assert_eq!(h.m.member_id(), "i1-abc");
    assert_eq!(h.m.generation(), -1);
    assert!(
        h.take_events()
            .iter()
            .any(|e| matches!(e, Event::Revoked { .. }))
    );
    h.m.subscribe(["t".to_string()], h.now).unwrap();
    let (_, id) = h.expect_join();
    assert_eq!(
        id, "i1-abc",
        "the rejoin carries the kept member id (KAFKA-20985)"
    );
}

#[test]
fn the_java_reset_policy_would_rejoin_with_an_empty_id() {
    // What the Java client does (resetGenerationOnLeaveGroup) is what this crate must not do:
    // make sure the test above can fail by checking the opposite policy's output differs.
    let mut h = Harness::stable(Some("i1"), "i1-abc");
    h.m.close(CloseOptions::LeaveGroup, h.now);
    let leave = h.one();
    let RequestKind::LeaveGroup(l) = body(&leave) else {
        panic!("{leave:?}")
    };
    assert_eq!(l.members[0].member_id.as_str(), "i1-abc");
    assert_eq!(l.members[0].group_instance_id.as_deref(), Some("i1"));
    h.answer(
        &leave,
        ResponseKind::LeaveGroup(LeaveGroupResponse::default()),
    );
    assert_eq!(
        h.m.member_id(),
        "",
        "after a LeaveGroup really went out the id is gone"
    );
    assert!(h.take_events().contains(&Event::Closed));
}

#[test]
fn close_semantics_per_kip_1092() {
    // Static, default: stays in the group.
    let mut h = Harness::stable(Some("i1"), "i1-abc");
    h.m.close(CloseOptions::Default, h.now);
    assert!(h.drain().is_empty());
    assert_eq!(h.m.member_id(), "i1-abc");
    assert!(h.take_events().contains(&Event::Closed));
    // Dynamic, default: leaves.
    let mut h = Harness::stable(None, "m-1");
    h.m.close(CloseOptions::Default, h.now);
    let leave = h.one();
    let RequestKind::LeaveGroup(l) = body(&leave) else {
        panic!("{leave:?}")
    };
    assert_eq!(l.members[0].member_id.as_str(), "m-1");
    assert_eq!(l.members[0].group_instance_id, None);
    // A failed LeaveGroup still completes the close (fire once).
    h.m.handle_response(leave.id, Err(crate::error::TransportError::Closed), h.now);
    assert!(h.take_events().contains(&Event::Closed));
    // Dynamic, remain in group: nothing sent.
    let mut h = Harness::stable(None, "m-1");
    h.m.close(CloseOptions::RemainInGroup, h.now);
    assert!(h.drain().is_empty());
    assert_eq!(h.m.member_id(), "m-1");
}

#[test]
fn dynamic_member_does_the_member_id_required_round_trip() {
    let mut h = Harness::new(None);
    h.subscribe_to_t();
    let (join, id) = h.expect_join();
    assert_eq!(id, "");
    h.answer(
        &join,
        ResponseKind::JoinGroup(
            JoinGroupResponse::default()
                .with_error_code(codes::MEMBER_ID_REQUIRED)
                .with_member_id(s("m-7")),
        ),
    );
    let (_, id) = h.expect_join();
    assert_eq!(id, "m-7", "rejoins at once with the id the broker named");
}

#[test]
fn unknown_member_id_for_the_current_generation_clears_the_id_stale_one_does_not() {
    let mut h = Harness::stable(Some("i1"), "i1-abc");
    // A stale answer: a heartbeat sent before, answered after a newer generation started.
    let hb = h.heartbeat();
    h.m.generation_for_tests(2);
    h.heartbeat_answer(&hb, 25);
    assert_eq!(
        h.m.member_id(),
        "i1-abc",
        "stale UNKNOWN_MEMBER_ID is ignored"
    );
    h.m.generation_for_tests(1);
    let hb = h.heartbeat();
    h.heartbeat_answer(&hb, 25);
    assert_eq!(h.m.member_id(), "");
    let events = h.take_events();
    assert!(
        events.iter().any(|e| matches!(e, Event::Lost { .. })),
        "{events:?}"
    );
}

#[test]
fn fenced_instance_id_is_terminal_and_names_the_instance() {
    let mut h = Harness::stable(Some("i1"), "i1-abc");
    let hb = h.heartbeat();
    h.heartbeat_answer(&hb, 82);
    assert_eq!(h.m.state(), MemberState::Fatal);
    let events = h.take_events();
    let want = GroupError::FencedInstanceId {
        group: "g".into(),
        instance_id: "i1".into(),
    };
    assert!(events.contains(&Event::Fatal(want.clone())), "{events:?}");
    assert!(want.to_string().contains("i1"));
    assert!(events.iter().any(|e| matches!(e, Event::Lost { .. })));
    h.advance(Duration::from_secs(60));
    assert!(h.drain().is_empty(), "a stopped member sends nothing");
    assert!(h.m.subscribe(["t".into()], h.now).is_err());
}

/// A commit sent before `close(LeaveGroup)` and answered FENCED_INSTANCE_ID by a coordinator
/// that gave the group up since the join (COORDINATOR_NOT_AVAILABLE on a heartbeat in between)
/// is the forgiven failover fence; the member is leaving, so it stays on its way out instead of
/// rejoining, and the LeaveGroup's answer closes it (found by tests/op_sequences.rs).
#[test]
fn a_forgiven_fence_answering_a_commit_does_not_turn_a_close_into_a_rejoin() {
    let mut h = Harness::stable(Some("i1"), "i1-abc");
    let hb = h.heartbeat();
    h.m.commit(
        vec![CommitOffset::new(TopicPartition::new("t", 0), 7)],
        h.now,
    );
    let commit = h.one();
    assert!(
        matches!(body(&commit), RequestKind::OffsetCommit(_)),
        "{commit:?}"
    );
    h.m.close(CloseOptions::LeaveGroup, h.now);
    let leave = h.one();
    assert!(
        matches!(body(&leave), RequestKind::LeaveGroup(_)),
        "{leave:?}"
    );
    h.heartbeat_answer(&hb, codes::COORDINATOR_NOT_AVAILABLE);
    h.answer(&commit, commit_answer(codes::FENCED_INSTANCE_ID));
    assert_eq!(h.m.state(), MemberState::Leaving, "{:?}", h.take_events());
    let out = h.drain();
    assert!(
        out.iter()
            .all(|o| !matches!(body(o), RequestKind::JoinGroup(_))),
        "a closing member never rejoins: {out:?}"
    );
    h.answer(
        &leave,
        ResponseKind::LeaveGroup(LeaveGroupResponse::default()),
    );
    assert_eq!(h.m.state(), MemberState::Closed);
    let events = h.take_events();
    assert_eq!(
        events.iter().filter(|e| matches!(e, Event::Closed)).count(),
        1,
        "{events:?}"
    );
    h.advance(Duration::from_secs(60));
    assert!(h.drain().is_empty(), "a closed member sends nothing");
}

/// An offset fetch that ran out of `default.api.timeout.ms` in flight is reported once
/// (TimedOut); its late answer reports nothing more, also after the member stopped (found by
/// tests/op_sequences.rs: a fetch timed out, the member was fenced, and the answer was reported
/// a second time).
#[test]
fn a_fetch_timed_out_in_flight_is_not_reported_again_by_its_answer_after_a_stop() {
    let mut h = Harness::stable(Some("i1"), "i1-abc");
    h.m.fetch_offsets(vec![TopicPartition::new("t", 0)], h.now);
    let fetch = h.one();
    assert!(
        matches!(body(&fetch), RequestKind::OffsetFetch(_)),
        "{fetch:?}"
    );
    // The application polls and heartbeats are answered until the fetch's 60 s ran out.
    for _ in 0..60 {
        h.m.poll(h.now);
        let hb = h.heartbeat();
        h.heartbeat_answer(&hb, codes::NONE);
    }
    let fetched = |events: &[Event]| -> Vec<Result<_, CommitError>> {
        picked!(events, Event::OffsetsFetched { result, .. } => result.clone())
    };
    let events = h.take_events();
    assert!(
        matches!(fetched(&events)[..], [Err(CommitError::TimedOut { .. })]),
        "{events:?}"
    );
    let hb = h.heartbeat();
    h.heartbeat_answer(&hb, codes::FENCED_INSTANCE_ID);
    assert_eq!(h.m.state(), MemberState::Fatal);
    h.answer(
        &fetch,
        ResponseKind::OffsetFetch(kafka_protocol::messages::OffsetFetchResponse::default()),
    );
    let events = h.take_events();
    assert!(fetched(&events).is_empty(), "reported twice: {events:?}");
}

#[test]
fn poll_timeout_keeps_a_static_members_id_and_the_next_poll_rejoins_with_it() {
    let mut h = Harness::stable(Some("i1"), "i1-abc");
    // Heartbeats keep going for 30 s without a poll.
    for _ in 0..29 {
        let hb = h.heartbeat();
        h.heartbeat_answer(&hb, 0);
    }
    h.advance(Duration::from_secs(1));
    let out = h.drain();
    assert!(
        out.iter()
            .all(|o| !matches!(body(o), RequestKind::LeaveGroup(_))),
        "static: no LeaveGroup"
    );
    assert_eq!(h.m.state(), MemberState::PollExpired);
    assert_eq!(h.m.member_id(), "i1-abc");
    assert!(h.take_events().iter().any(|e| matches!(
        e,
        Event::Lost {
            reason: Reason::PollTimeout,
            ..
        }
    )));
    h.m.poll(h.now);
    let (_, id) = h.expect_join();
    assert_eq!(id, "i1-abc");
}

#[test]
fn session_expiry_and_coordinator_loss_keep_the_member_id() {
    let mut h = Harness::stable(Some("i1"), "i1-abc");
    let hb = h.heartbeat();
    h.heartbeat_answer(&hb, 16); // NOT_COORDINATOR
    h.advance(Duration::from_secs(2));
    h.find_coordinator();
    let hb = h.heartbeat();
    assert_eq!(h.m.member_id(), "i1-abc");
    // No answers for the whole session timeout.
    h.m.handle_response(hb.id, Err(crate::error::TransportError::Closed), h.now);
    h.advance(Duration::from_secs(11));
    let out = h.drain();
    assert!(
        out.iter()
            .any(|o| matches!(o.request, Request::FindCoordinator { .. })),
        "{out:?}"
    );
    assert_eq!(h.m.member_id(), "i1-abc");
    // The lease ran out before the session: partitions lost, generation gone, id kept.
    assert_eq!(h.m.generation(), -1);
    assert!(h.m.assignment().is_empty());
}

/// Lost events with the lease reason.
fn lease_losses(events: &[Event]) -> Vec<Vec<TopicPartition>> {
    picked!(events, Event::Lost {
                partitions,
                reason: Reason::LeaseExpired,
            } => partitions.clone())
}

fn commit_result(events: &[Event], id: crate::machine::events::CommitId) -> Option<&CommitError> {
    events.iter().find_map(|e| match e {
        Event::Committed { id: i, result } if *i == id => result.as_ref().err(),
        _ => None,
    })
}

#[test]
fn lease_expires_at_the_bound_from_the_last_confirmed_send_not_before() {
    // session 10 s, heartbeat 1 s: the lease holds 9 s from the send of the last heartbeat
    // answered.
    let mut h = Harness::stable(Some("i1"), "i1-abc");
    let hb = h.heartbeat();
    let confirmed = h.now;
    // Answered late, 5 s after it went out: the lease runs from the send, not the answer.
    h.advance(Duration::from_millis(500));
    h.drain();
    h.now += Duration::from_millis(4500);
    h.heartbeat_answer(&hb, 0);
    // The next heartbeats go out and are never answered.
    let out = h.drain();
    assert!(
        matches!(out.as_slice(), [o] if matches!(body(o), RequestKind::Heartbeat(_))),
        "{out:?} {:?}",
        h.events
    );
    h.m.handle_timeout(confirmed + Duration::from_secs(9) - Duration::from_millis(1));
    h.now = confirmed + Duration::from_secs(9) - Duration::from_millis(1);
    let events = h.take_events();
    assert!(lease_losses(&events).is_empty(), "{events:?}");
    assert_eq!(h.m.state(), MemberState::Stable);
    assert_eq!(
        h.m.poll_timeout()
            .map(|(at, _)| at <= confirmed + Duration::from_secs(9)),
        Some(true)
    );
    h.now = confirmed + Duration::from_secs(9);
    h.m.handle_timeout(h.now);
    let out = h.drain();
    let events = h.take_events();
    assert_eq!(
        lease_losses(&events),
        vec![vec![
            TopicPartition::new("t", 0),
            TopicPartition::new("t", 1)
        ]],
        "{events:?}"
    );
    assert_eq!(h.m.member_id(), "i1-abc", "the member id is kept");
    assert_eq!(h.m.generation(), -1);
    assert!(h.m.assignment().is_empty());
    let lookup = out
        .iter()
        .find(|o| matches!(o.request, Request::FindCoordinator { .. }))
        .expect("the coordinator is looked up again");
    // Commits are refused locally, typed.
    h.commit_refused_by_the_lease(0);
    // The coordinator answers again: the member rejoins with its member id and instance id.
    h.answer_find_coordinator(lookup, 1);
    let (join, id) = h.expect_join();
    assert_eq!(id, "i1-abc");
    let RequestKind::JoinGroup(j) = body(&join) else {
        unreachable!()
    };
    assert_eq!(j.group_instance_id.as_deref(), Some("i1"));
    h.join_ok(&join, "i1-abc", 2, "leader-other");
    h.sync_ok(&[("t", 0)]);
    assert_eq!(h.m.state(), MemberState::Stable);
    let c = h.m.commit(
        vec![CommitOffset::new(TopicPartition::new("t", 0), 7)],
        h.now,
    );
    let out = h.drain();
    assert!(
        out.iter()
            .any(|o| matches!(body(o), RequestKind::OffsetCommit(_))),
        "{out:?}"
    );
    assert_eq!(commit_result(&h.take_events(), c), None);
}

#[test]
fn a_starved_member_reports_the_lease_lost_before_acting_on_a_late_answer() {
    let mut h = Harness::stable(None, "m-1");
    let hb = h.heartbeat();
    h.take_events();
    // The process is not driven for 30 s; then the heartbeat's (successful) answer is the
    // first input. It went out 30 s ago and cannot vouch for the membership now.
    h.now += Duration::from_secs(30);
    h.heartbeat_answer(&hb, 0);
    let events = h.take_events();
    crate::testutil::assert_lease_lost_first(&events);
    assert_eq!(h.m.generation(), -1);
    assert_eq!(h.m.member_id(), "m-1");
    // A timer catch-up after starvation does the same.
    let mut h = Harness::stable(None, "m-1");
    h.take_events();
    h.now += Duration::from_secs(30);
    h.m.handle_timeout(h.now);
    let events = h.take_events();
    crate::testutil::assert_lease_lost_first(&events);
    // And a commit as the first call after starvation is refused.
    let mut h = Harness::stable(None, "m-1");
    h.take_events();
    h.now += Duration::from_secs(30);
    let events = h.commit_refused_by_the_lease(1);
    assert_eq!(lease_losses(&events).len(), 1, "{events:?}");
}

#[test]
fn a_healthy_member_never_loses_its_lease() {
    let mut h = Harness::stable(Some("i1"), "i1-abc");
    for _ in 0..500 {
        h.m.poll(h.now);
        let hb = h.heartbeat();
        h.now += Duration::from_millis(300);
        h.heartbeat_answer(&hb, 0);
    }
    let events = h.take_events();
    assert!(
        !events.iter().any(|e| matches!(e, Event::Lost { .. })),
        "{events:?}"
    );
    assert_eq!(h.m.state(), MemberState::Stable);
    assert_eq!(h.m.generation(), 1);
}

#[test]
fn eager_rebalance_revokes_with_a_ticket_before_rejoining() {
    let mut h = Harness::stable(Some("i1"), "i1-abc");
    let hb = h.heartbeat();
    h.heartbeat_answer(&hb, 27); // REBALANCE_IN_PROGRESS
    let mut events = h.take_events();
    let pos = events
        .iter()
        .position(|e| matches!(e, Event::Revoking { .. }))
        .expect("revoking");
    let Event::Revoking { partitions, ticket } = events.remove(pos) else {
        unreachable!()
    };
    assert_eq!(partitions.len(), 2);
    // Commits still go through with the current generation while revoking.
    let c = h.m.commit(
        vec![CommitOffset {
            partition: TopicPartition::new("t", 0),
            offset: 5,
            metadata: None,
        }],
        h.now,
    );
    let commit = h.one();
    assert!(
        matches!(body(&commit), RequestKind::OffsetCommit(ref r) if r.generation_id_or_member_epoch == 1),
        "{commit:?}"
    );
    let _ = c;
    // No JoinGroup before the ticket comes back.
    h.advance(Duration::from_secs(3));
    assert!(
        h.drain()
            .iter()
            .all(|o| !matches!(body(o), RequestKind::JoinGroup(_)))
    );
    h.m.complete_revocation(ticket, h.now).unwrap();
    let out = h.drain();
    assert!(
        out.iter().any(
            |o| matches!(body(o), RequestKind::JoinGroup(ref j) if j.member_id.as_str() == "i1-abc")
        ),
        "{out:?}"
    );
}

#[test]
fn commit_during_a_rebalance_and_outside_the_group_are_typed() {
    let mut h = Harness::new(Some("i1"));
    let id = h.m.commit(vec![], h.now);
    let events = h.take_events();
    assert!(events.iter().any(|e| matches!(e, Event::Committed { id: i, result: Err(CommitError::NotMember { .. }) } if *i == id)), "{events:?}");
    h.subscribe_to_t();
    let _join = h.expect_join();
    let id = h.m.commit(vec![], h.now);
    let events = h.take_events();
    assert!(events.iter().any(|e| matches!(e, Event::Committed { id: i, result: Err(CommitError::RebalanceInProgress) } if *i == id)), "{events:?}");
}

/// A commit names only partitions the member owns (or is revoking), checked at every attempt:
/// one for a partition it does not own, or no longer owns once its revocation completed, is
/// refused locally and nothing goes out.
#[test]
fn commits_of_partitions_the_member_does_not_own_are_refused_at_every_attempt() {
    let offset = |topic: &str| CommitOffset {
        partition: TopicPartition::new(topic, 0),
        offset: 5,
        metadata: None,
    };
    let (mut h, ticket) = Harness::revoking(None, "m-1");
    let id = h.m.commit(vec![offset("t"), offset("elsewhere")], h.now);
    assert!(h.drain().is_empty(), "nothing sent");
    let events = h.take_events();
    assert!(events.iter().any(|e| matches!(e, Event::Committed { id: i, result: Err(CommitError::NotOwned { partitions }) } if *i == id && partitions == &[TopicPartition::new("elsewhere", 0)])), "{events:?}");
    // Still the application's while the ticket is out.
    h.m.commit(vec![offset("t")], h.now);
    assert!(matches!(body(&h.one()), RequestKind::OffsetCommit(_)));
    h.m.complete_revocation(ticket, h.now).unwrap();
    h.drain();
    // After the ticket: no longer the member's, whatever the phase.
    let id = h.m.commit(vec![offset("t")], h.now);
    let events = h.take_events();
    assert!(events.iter().any(|e| matches!(e, Event::Committed { id: i, result: Err(CommitError::RebalanceInProgress | CommitError::NotOwned { .. }) } if *i == id)), "{events:?}");
}

/// A generation of `i32::MAX` and another JoinGroup answer: no overflow (a panic in debug
/// builds, wrongly lost partitions in release), and nothing reported lost.
#[test]
fn the_largest_generation_and_a_rejoin_do_not_overflow() {
    let mut h = Harness::new(None);
    h.subscribe_to_t();
    let (join, _) = h.expect_join();
    h.join_ok(&join, "m-1", i32::MAX, "leader-other");
    h.sync_ok(&[("t", 0), ("t", 1)]);
    assert_eq!(h.m.generation(), i32::MAX);
    let hb = h.heartbeat();
    h.heartbeat_answer(&hb, 27);
    let ticket = h.take_ticket();
    h.m.complete_revocation(ticket, h.now).unwrap();
    let (join, _) = h.expect_join();
    h.join_ok(&join, "m-1", i32::MAX, "leader-other");
    let events = h.take_events();
    assert!(
        !events.iter().any(|e| matches!(e, Event::Lost { .. })),
        "{events:?}"
    );
}

#[test]
fn an_empty_id_join_in_doubt_holds_the_next_one_and_forgives_one_self_fence() {
    let mut h = Harness::new(Some("i1"));
    h.subscribe_to_t();
    let (join, id) = h.expect_join();
    assert_eq!(id, "");
    // The join's fate is unknown (connection lost after it was written).
    h.m.handle_response(join.id, Err(crate::error::TransportError::Closed), h.now);
    h.advance(Duration::from_secs(2));
    h.find_coordinator();
    h.advance(Duration::from_secs(2));
    assert!(
        h.drain()
            .iter()
            .all(|o| !matches!(body(o), RequestKind::JoinGroup(_))),
        "no second empty-id join while the first may land"
    );
    // The application keeps polling meanwhile (max.poll.interval.ms is 30 s here).
    for _ in 0..7 {
        h.m.poll(h.now);
        h.advance(Duration::from_secs(5));
    }
    let (join2, id) = h.expect_join();
    assert_eq!(id, "");
    h.join_ok(&join2, "i1-new", 1, "other");
    h.sync_ok(&[("t", 0)]);
    // The first join landed late and replaced us: FENCED, forgiven once.
    let hb = h.heartbeat();
    h.heartbeat_answer(&hb, 82);
    assert_ne!(h.m.state(), MemberState::Fatal);
    let (_, id) = h.expect_join();
    assert_eq!(id, "", "rejoins to take the instance back");
}

#[test]
fn leader_assigns_with_metadata_and_skip_assignment_is_honoured() {
    // Leader: Metadata, then SyncGroup with an assignment per member.
    let mut h = Harness::new(Some("i1"));
    h.subscribe_to_t();
    let (join, _) = h.expect_join();
    let sub = Subscription {
        topics: vec!["t".into()],
        user_data: None,
        owned_partitions: vec![],
        generation_id: -1,
        rack_id: None,
    }
    .encode();
    let members = ["i1-abc", "i2-def"]
        .iter()
        .zip(["i1", "i2"])
        .map(|(m, i)| {
            JoinGroupResponseMember::default()
                .with_member_id(s(m))
                .with_group_instance_id(Some(s(i)))
                .with_metadata(sub.clone())
        })
        .collect();
    let r = JoinGroupResponse::default()
        .with_generation_id(3)
        .with_protocol_type(Some(s("consumer")))
        .with_protocol_name(Some(s("range")))
        .with_leader(s("i1-abc"))
        .with_member_id(s("i1-abc"))
        .with_members(members);
    h.answer(&join, ResponseKind::JoinGroup(r.clone()));
    let sg = h.leader_sync(4);
    assert_eq!(sg.assignments.len(), 2);
    let mut all = Vec::new();
    for a in &sg.assignments {
        all.extend(Assignment::decode(&a.assignment).unwrap().partitions);
    }
    all.sort();
    assert_eq!(
        all,
        (0..4)
            .map(|p| TopicPartition::new("t", p))
            .collect::<Vec<_>>()
    );

    // A returning static leader told to skip assignment sends an empty one, no Metadata.
    let mut h = Harness::new(Some("i1"));
    h.subscribe_to_t();
    let (join, _) = h.expect_join();
    h.answer(&join, ResponseKind::JoinGroup(r.with_skip_assignment(true)));
    let sync = h.one();
    let RequestKind::SyncGroup(sg) = body(&sync) else {
        panic!("{sync:?}")
    };
    assert!(sg.assignments.is_empty());
}

#[test]
fn stale_and_unexpected_answers_are_ignored() {
    let mut h = Harness::stable(Some("i1"), "i1-abc");
    // An answer to a request never sent.
    h.m.handle_response(
        crate::request::RequestId(424242),
        Ok(Response {
            version: 4,
            body: ResponseBody::Kafka(ResponseKind::Heartbeat(
                HeartbeatResponse::default().with_error_code(codes::UNKNOWN_MEMBER_ID),
            )),
        }),
        h.now,
    );
    assert_eq!(h.m.member_id(), "i1-abc");
    assert_eq!(h.m.state(), MemberState::Stable);
}

// ------------------------------------------------- found by tests/op_sequences.rs (regressions)

/// Every request in `out` that is a LeaveGroup.
fn leaves(out: &[Outbound]) -> usize {
    out.iter()
        .filter(|o| matches!(body(o), RequestKind::LeaveGroup(_)))
        .count()
}

impl Harness {
    /// Leader: answers the outstanding Metadata request with topic "t" of `partitions`
    /// partitions; returns the SyncGroup that follows.
    fn leader_sync(&mut self, partitions: i32) -> kafka_protocol::messages::SyncGroupRequest {
        let out = self.one();
        assert!(is_metadata(&out), "{out:?}");
        self.answer(
            &out,
            metadata_answer(&[("t", uuid::Uuid::from_u128(9), partitions)]),
        );
        let sync = self.one();
        let RequestKind::SyncGroup(sg) = body(&sync) else {
            panic!("{sync:?}")
        };
        sg
    }

    /// A deadline at or before now that `handle_timeout(now)` leaves in place (a driver spins).
    fn stuck_deadline(&mut self) -> Option<crate::machine::timer::Timer> {
        self.m.handle_timeout(self.now);
        self.drain();
        self.m
            .poll_timeout()
            .filter(|(at, _)| *at <= self.now)
            .map(|(_, t)| t)
    }

    /// Answers `join` making this member ("i1-abc") the leader of `generation`, with another
    /// member subscribed to "x", a topic that does not exist (so the leader re-checks metadata
    /// after retry.backoff.max.ms, 1 s). Answers the leader's Metadata; the SyncGroup is left
    /// outstanding and returned.
    fn lead(&mut self, join: &Outbound, generation: i32) -> Outbound {
        let sub = |t: &str| Subscription::new(vec![t]).encode();
        let r = JoinGroupResponse::default()
            .with_generation_id(generation)
            .with_protocol_type(Some(s("consumer")))
            .with_protocol_name(Some(s("range")))
            .with_leader(s("i1-abc"))
            .with_member_id(s("i1-abc"))
            .with_members(vec![
                JoinGroupResponseMember::default()
                    .with_member_id(s("i1-abc"))
                    .with_metadata(sub("t")),
                JoinGroupResponseMember::default()
                    .with_member_id(s("other"))
                    .with_metadata(sub("x")),
            ]);
        self.answer(join, ResponseKind::JoinGroup(r));
        let md = self.one();
        assert!(is_metadata(&md), "{md:?}");
        self.answer(&md, metadata_answer(&[("t", uuid::Uuid::nil(), 1)]));
        let sync = self.one();
        assert!(matches!(body(&sync), RequestKind::SyncGroup(_)), "{sync:?}");
        sync
    }

    /// Stable, with the Revoking ticket of an eager rebalance (REBALANCE_IN_PROGRESS) out.
    fn revoking(
        instance: Option<&str>,
        member: &str,
    ) -> (Self, crate::machine::events::RevokeTicket) {
        let mut h = Self::stable(instance, member);
        let hb = h.heartbeat();
        h.heartbeat_answer(&hb, 27);
        assert_eq!(h.m.state(), MemberState::AwaitRevoke);
        let ticket = h.take_ticket();
        (h, ticket)
    }

    /// The ticket of the [`Event::Revoking`] among the events.
    fn take_ticket(&mut self) -> crate::machine::events::RevokeTicket {
        self.take_events()
            .into_iter()
            .find_map(|e| match e {
                Event::Revoking { ticket, .. } => Some(ticket),
                _ => None,
            })
            .expect("a revocation ticket")
    }
}

#[test]
fn the_leaders_metadata_deadline_counts_only_when_the_re_check_can_be_sent() {
    let mut h = Harness::new(Some("i1"));
    h.subscribe_to_t();
    let (join, _) = h.expect_join();
    let sync = h.lead(&join, 1);
    // The re-check is due during the SyncGroup: not a deadline while it cannot be sent.
    h.advance(Duration::from_secs(1));
    assert_eq!(h.m.state(), MemberState::Syncing);
    assert_eq!(
        h.stuck_deadline(),
        None,
        "a driver would spin while Syncing"
    );
    h.answer(
        &sync,
        ResponseKind::SyncGroup(
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
    );
    assert_eq!(h.m.state(), MemberState::Stable);
    // Stable again: the overdue re-check goes out at once.
    let out = h.drain();
    assert!(
        out.iter()
            .any(|o| matches!(o.request, Request::Metadata { .. })),
        "{out:#?}"
    );
    assert_eq!(h.stuck_deadline(), None);
}

#[test]
fn a_leader_that_loses_its_generation_drops_its_metadata_deadline() {
    // A static leader's generation ends without LeaveGroup (ILLEGAL_GENERATION); it comes back
    // and the coordinator tells it to skip the assignment (KIP-814): it has nothing to watch,
    // and the earlier leadership's re-check must not be a deadline for ever.
    let mut h = Harness::new(Some("i1"));
    h.subscribe_to_t();
    let (join, _) = h.expect_join();
    let _sync = h.lead(&join, 1);
    h.advance(Duration::from_secs(1));
    let hb = h.one();
    assert!(matches!(body(&hb), RequestKind::Heartbeat(_)), "{hb:?}");
    h.heartbeat_answer(&hb, 22);
    assert_eq!(h.m.generation(), -1);
    let (join, id) = h.expect_join();
    assert_eq!(id, "i1-abc");
    let r = JoinGroupResponse::default()
        .with_generation_id(2)
        .with_protocol_type(Some(s("consumer")))
        .with_protocol_name(Some(s("range")))
        .with_leader(s("i1-abc"))
        .with_member_id(s("i1-abc"))
        .with_skip_assignment(true);
    h.answer(&join, ResponseKind::JoinGroup(r));
    h.sync_ok(&[("t", 0)]);
    assert_eq!(h.m.state(), MemberState::Stable);
    assert!(h.m.is_leader());
    for _ in 0..3 {
        h.advance(Duration::from_secs(1));
        let out = h.drain();
        assert!(
            out.iter()
                .all(|o| !matches!(o.request, Request::Metadata { .. })),
            "a leader that skipped the assignment watches nothing: {out:#?}"
        );
        assert_eq!(h.stuck_deadline(), None, "a driver would spin while Stable");
    }
}

/// A close takes an outstanding revocation ticket back and leaves at once: the rebalance does
/// not wait for a ticket the application may not even have read (the README's loop drains
/// events only after `close()` returned).
#[test]
fn close_during_a_revocation_takes_the_ticket_back_and_leaves_at_once() {
    let (mut h, ticket) = Harness::revoking(None, "m-1");
    h.m.close(CloseOptions::Default, h.now);
    let leave = h.one();
    let RequestKind::LeaveGroup(l) = body(&leave) else {
        panic!("{leave:?}")
    };
    assert_eq!(l.members[0].member_id.as_str(), "m-1");
    assert_eq!(h.m.state(), MemberState::Leaving);
    // The ticket handed back late is no longer awaited.
    assert_eq!(
        h.m.complete_revocation(ticket, h.now),
        Err(crate::error::ApiMisuse::UnknownTicket)
    );
    // Calls after close do not undo it.
    assert_eq!(
        h.m.subscribe(["t".to_string()], h.now),
        Err(crate::error::ApiMisuse::Stopped)
    );
    h.answer(
        &leave,
        ResponseKind::LeaveGroup(LeaveGroupResponse::default()),
    );
    assert_eq!(h.m.state(), MemberState::Closed);
    assert!(h.take_events().contains(&Event::Closed));

    // A static member owes no LeaveGroup: it closes at once, keeping its id.
    let (mut h, _ticket) = Harness::revoking(Some("i1"), "i1-abc");
    h.m.close(CloseOptions::Default, h.now);
    assert_eq!(leaves(&h.drain()), 0);
    assert_eq!(h.m.state(), MemberState::Closed);
    assert_eq!(h.m.member_id(), "i1-abc");
}

#[test]
fn subscribe_and_unsubscribe_after_close_do_not_undo_it() {
    // Dynamic: during the close's LeaveGroup.
    let mut h = Harness::stable(None, "m-1");
    h.m.close(CloseOptions::Default, h.now);
    let leave = h.one();
    assert!(
        matches!(body(&leave), RequestKind::LeaveGroup(_)),
        "{leave:?}"
    );
    h.m.unsubscribe(h.now);
    assert_eq!(
        h.m.subscribe(["t".to_string()], h.now),
        Err(crate::error::ApiMisuse::Stopped)
    );
    h.m.poll(h.now);
    h.advance(Duration::from_secs(31));
    assert!(h.drain().is_empty(), "a second LeaveGroup or a rejoin");
    assert_eq!(h.m.state(), MemberState::Leaving);
    h.answer(
        &leave,
        ResponseKind::LeaveGroup(LeaveGroupResponse::default()),
    );
    assert_eq!(h.m.state(), MemberState::Closed);
    assert_eq!(h.m.member_id(), "", "a LeaveGroup went out");
    assert!(h.take_events().contains(&Event::Closed));
}

// ------------------------------------------------- unsubscribe during a revocation

impl Harness {
    /// The `StateChanged` events among `events`, as `(from, to, reason)`.
    fn transitions(events: &[Event]) -> Vec<(MemberState, MemberState, Reason)> {
        picked!(events, Event::StateChanged {
                    from, to, reason, ..
                } => (*from, *to, *reason))
    }

    /// Answers the heartbeats that `d` of time brings (one per second), checking that nothing
    /// but heartbeats goes out meanwhile.
    fn heartbeats_for(&mut self, d: Duration) {
        for _ in 0..d.as_secs() {
            self.advance(Duration::from_secs(1));
            self.m.poll(self.now);
            for out in self.drain() {
                assert!(matches!(body(&out), RequestKind::Heartbeat(_)), "{out:?}");
                self.heartbeat_answer(&out, 0);
            }
        }
    }

    /// A dynamic member ("m-1") with only `cooperative-sticky`: stable with t-0 and t-1, then a
    /// cooperative rebalance moves t-1 away: the ticket covers t-1 only, t-0 stays owned.
    fn cooperative_revoking() -> (Self, crate::machine::events::RevokeTicket) {
        let c = config(None).with_assignor(super::assignor::CooperativeSticky);
        let mut h = Self::with_config(c);
        let (joined, synced) = (coop_joined, coop_synced);
        h.subscribe_to_t();
        let (join, _) = h.expect_join();
        h.answer(&join, joined(1));
        let sync = h.one();
        h.answer(&sync, synced(&[0, 1]));
        assert_eq!(h.m.state(), MemberState::Stable);
        let hb = h.heartbeat();
        h.heartbeat_answer(&hb, 27);
        // Cooperative: nothing to revoke before the JoinGroup.
        let (join, id) = h.expect_join();
        assert_eq!(id, "m-1");
        h.answer(&join, joined(2));
        let sync = h.one();
        h.answer(&sync, synced(&[0]));
        assert_eq!(h.m.state(), MemberState::AwaitRevoke);
        let ticket = h
            .take_events()
            .into_iter()
            .find_map(|e| match e {
                Event::Revoking { partitions, ticket } => {
                    assert_eq!(partitions, vec![TopicPartition::new("t", 1)]);
                    Some(ticket)
                }
                _ => None,
            })
            .expect("a revocation ticket");
        assert_eq!(h.m.assignment(), vec![TopicPartition::new("t", 0)]);
        (h, ticket)
    }
}

#[test]
fn unsubscribe_during_a_revocation_sends_leave_group_only_once_the_ticket_is_back() {
    let (mut h, ticket) = Harness::revoking(None, "m-1");
    h.m.unsubscribe(h.now);
    assert_eq!(
        leaves(&h.drain()),
        0,
        "LeaveGroup before the ticket is back"
    );
    assert_eq!(h.m.state(), MemberState::AwaitRevoke);
    assert_eq!(h.m.generation(), 1);
    // Still in its generation meanwhile: commits and heartbeats go out.
    h.m.commit(
        vec![CommitOffset {
            partition: TopicPartition::new("t", 0),
            offset: 7,
            metadata: None,
        }],
        h.now,
    );
    let commit = h.one();
    assert!(
        matches!(body(&commit), RequestKind::OffsetCommit(ref r) if r.generation_id_or_member_epoch == 1 && r.member_id.as_str() == "m-1"),
        "{commit:?}"
    );
    h.heartbeats_for(Duration::from_secs(5));
    assert_eq!(h.m.state(), MemberState::AwaitRevoke);
    // A second unsubscribe changes nothing.
    h.m.unsubscribe(h.now);
    assert_eq!(leaves(&h.drain()), 0);
    h.take_events();
    h.m.complete_revocation(ticket, h.now).unwrap();
    let leave = h.one();
    let RequestKind::LeaveGroup(l) = body(&leave) else {
        panic!("{leave:?}")
    };
    assert_eq!(l.members[0].member_id.as_str(), "m-1");
    assert_eq!(
        l.members[0].reason.as_deref(),
        Some("unsubscribed after the revocation completed")
    );
    assert_eq!(h.m.state(), MemberState::Leaving);
    h.answer(
        &leave,
        ResponseKind::LeaveGroup(LeaveGroupResponse::default()),
    );
    assert_eq!(h.m.state(), MemberState::Unsubscribed);
    assert_eq!(h.m.member_id(), "", "a LeaveGroup went out");
    let events = h.take_events();
    assert!(!events.contains(&Event::Closed));
    assert_eq!(
        Harness::transitions(&events),
        vec![
            (
                MemberState::AwaitRevoke,
                MemberState::Leaving,
                Reason::UnsubscribedAfterRevocation
            ),
            (
                MemberState::Leaving,
                MemberState::Unsubscribed,
                Reason::LeaveGroupSent
            )
        ]
    );
    h.advance(Duration::from_secs(40));
    assert!(h.drain().is_empty(), "an unsubscribed member sends nothing");
}

#[test]
fn unsubscribe_during_a_cooperative_revocation_releases_what_the_ticket_does_not_cover() {
    let (mut h, ticket) = Harness::cooperative_revoking();
    h.m.unsubscribe(h.now);
    assert_eq!(leaves(&h.drain()), 0);
    let events = h.take_events();
    assert_eq!(
        events,
        vec![Event::Revoked {
            partitions: vec![TopicPartition::new("t", 0)]
        }],
        "t-0 released at once, t-1 stays under the ticket"
    );
    assert!(h.m.assignment().is_empty());
    assert_eq!(h.m.state(), MemberState::AwaitRevoke);
    h.heartbeats_for(Duration::from_secs(3));
    h.m.complete_revocation(ticket, h.now).unwrap();
    let leave = h.one();
    assert!(
        matches!(body(&leave), RequestKind::LeaveGroup(_)),
        "{leave:?}"
    );
    // The JoinGroup the revocation was for never goes out.
    h.answer(
        &leave,
        ResponseKind::LeaveGroup(LeaveGroupResponse::default()),
    );
    assert_eq!(h.m.state(), MemberState::Unsubscribed);
    h.advance(Duration::from_secs(5));
    assert!(h.drain().is_empty());
}

#[test]
fn unsubscribe_during_a_revocation_leaves_without_the_ticket_after_max_poll_interval() {
    let (mut h, ticket) = Harness::revoking(None, "m-1");
    h.m.unsubscribe(h.now);
    // poll() does not push the deadline out: the application is not subscribed any more.
    h.heartbeats_for(Duration::from_secs(29));
    assert_eq!(h.m.state(), MemberState::AwaitRevoke);
    h.take_events();
    h.advance(Duration::from_secs(1));
    let out = h.drain();
    assert_eq!(leaves(&out), 1, "{out:#?}");
    let leave = out
        .into_iter()
        .find(|o| matches!(body(o), RequestKind::LeaveGroup(_)))
        .unwrap();
    let RequestKind::LeaveGroup(l) = body(&leave) else {
        unreachable!()
    };
    assert_eq!(
        l.members[0].reason.as_deref(),
        Some("unsubscribed without the revocation ticket")
    );
    assert_eq!(h.m.state(), MemberState::Leaving);
    assert_eq!(
        h.m.complete_revocation(ticket, h.now),
        Err(crate::error::ApiMisuse::UnknownTicket),
        "too late"
    );
    h.answer(
        &leave,
        ResponseKind::LeaveGroup(LeaveGroupResponse::default()),
    );
    assert_eq!(h.m.state(), MemberState::Unsubscribed);
    assert!(!h.take_events().contains(&Event::Closed));

    // An answer that voids the revocation: ILLEGAL_GENERATION keeps the member id, so the
    // dynamic member leaves at once; UNKNOWN_MEMBER_ID leaves nothing to leave with.
    let (mut h, _ticket) = Harness::revoking(None, "m-1");
    h.m.unsubscribe(h.now);
    let hb = h.heartbeat();
    h.heartbeat_answer(&hb, 22);
    assert_eq!(leaves(&h.drain()), 1);
    assert_eq!(h.m.state(), MemberState::Leaving);
    let (mut h, _ticket) = Harness::revoking(None, "m-1");
    h.m.unsubscribe(h.now);
    let hb = h.heartbeat();
    h.heartbeat_answer(&hb, 25);
    assert_eq!(leaves(&h.drain()), 0, "no member id left to leave with");
    assert_eq!(h.m.state(), MemberState::Unsubscribed);
    assert_eq!(h.m.member_id(), "");
}

#[test]
fn static_unsubscribe_during_a_revocation_sends_no_leave_group_and_keeps_the_id() {
    let (mut h, ticket) = Harness::revoking(Some("i1"), "i1-abc");
    h.m.unsubscribe(h.now);
    assert!(h.drain().is_empty());
    // Waits for the ticket like a dynamic member (its generation stays usable for commits).
    assert_eq!(h.m.state(), MemberState::AwaitRevoke);
    assert_eq!(h.m.generation(), 1);
    h.heartbeats_for(Duration::from_secs(3));
    h.take_events();
    h.m.complete_revocation(ticket, h.now).unwrap();
    assert_eq!(leaves(&h.drain()), 0);
    assert_eq!(h.m.state(), MemberState::Unsubscribed);
    assert_eq!(h.m.member_id(), "i1-abc");
    assert_eq!(h.m.generation(), -1);
    assert_eq!(
        Harness::transitions(&h.take_events()),
        vec![(
            MemberState::AwaitRevoke,
            MemberState::Unsubscribed,
            Reason::UnsubscribedAfterRevocation
        )]
    );
    // Subscribing again rejoins with the kept id.
    h.m.subscribe(["t".to_string()], h.now).unwrap();
    let (_, id) = h.expect_join();
    assert_eq!(id, "i1-abc");

    // Without the ticket: nothing at the deadline either.
    let (mut h, _ticket) = Harness::revoking(Some("i1"), "i1-abc");
    h.m.unsubscribe(h.now);
    h.heartbeats_for(Duration::from_secs(29));
    h.advance(Duration::from_secs(1));
    assert_eq!(leaves(&h.drain()), 0);
    assert_eq!(h.m.state(), MemberState::Unsubscribed);
    assert_eq!(h.m.member_id(), "i1-abc");
}

#[test]
fn subscribe_before_the_ticket_cancels_a_deferred_unsubscribe() {
    let (mut h, ticket) = Harness::revoking(None, "m-1");
    h.m.unsubscribe(h.now);
    h.heartbeats_for(Duration::from_secs(10));
    h.m.subscribe(["t".to_string()], h.now).unwrap();
    assert_eq!(h.m.state(), MemberState::AwaitRevoke);
    // The unsubscribe's deadline (30 s after it) is gone; the application's polls count again.
    h.heartbeats_for(Duration::from_secs(25));
    assert_eq!(h.m.state(), MemberState::AwaitRevoke);
    h.take_events();
    // The ticket's return rejoins with the new subscription, as the member never left.
    h.m.complete_revocation(ticket, h.now).unwrap();
    let out = h.drain();
    assert_eq!(leaves(&out), 0, "{out:#?}");
    let joins: Vec<String> = out
        .iter()
        .filter_map(|o| match body(o) {
            RequestKind::JoinGroup(j) => Some(j.member_id.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(joins, vec!["m-1".to_string()], "{out:#?}");
    assert_eq!(h.m.state(), MemberState::Joining);

    // Unsubscribe, subscribe, unsubscribe: the last one waits for the ticket again, with a
    // deadline of its own.
    let (mut h, ticket) = Harness::revoking(None, "m-1");
    h.m.unsubscribe(h.now);
    h.m.subscribe(["t".to_string()], h.now).unwrap();
    h.heartbeats_for(Duration::from_secs(20));
    h.m.unsubscribe(h.now);
    h.heartbeats_for(Duration::from_secs(20));
    assert_eq!(h.m.state(), MemberState::AwaitRevoke);
    h.m.complete_revocation(ticket, h.now).unwrap();
    assert_eq!(leaves(&h.drain()), 1);
    assert_eq!(h.m.state(), MemberState::Leaving);
}

#[test]
fn close_after_a_deferred_unsubscribe_still_closes() {
    // Dynamic: the unsubscribe waits for the ticket; the close ends the wait and leaves.
    let (mut h, ticket) = Harness::revoking(None, "m-1");
    h.m.unsubscribe(h.now);
    h.heartbeats_for(Duration::from_secs(5));
    assert_eq!(h.m.state(), MemberState::AwaitRevoke);
    h.m.close(CloseOptions::Default, h.now);
    let leave = h.one();
    assert!(
        matches!(body(&leave), RequestKind::LeaveGroup(_)),
        "{leave:?}"
    );
    assert_eq!(
        h.m.subscribe(["t".to_string()], h.now),
        Err(crate::error::ApiMisuse::Stopped)
    );
    assert_eq!(
        h.m.complete_revocation(ticket, h.now),
        Err(crate::error::ApiMisuse::UnknownTicket)
    );
    h.answer(
        &leave,
        ResponseKind::LeaveGroup(LeaveGroupResponse::default()),
    );
    assert_eq!(h.m.state(), MemberState::Closed);
    assert!(h.take_events().contains(&Event::Closed));

    // Static: a close(LeaveGroup) after the unsubscribe leaves with the instance id.
    let (mut h, _ticket) = Harness::revoking(Some("i1"), "i1-abc");
    h.m.unsubscribe(h.now);
    h.m.close(CloseOptions::LeaveGroup, h.now);
    let leave = h.one();
    let RequestKind::LeaveGroup(l) = body(&leave) else {
        panic!("{leave:?}")
    };
    assert_eq!(l.members[0].group_instance_id.as_deref(), Some("i1"));
    h.answer(
        &leave,
        ResponseKind::LeaveGroup(LeaveGroupResponse::default()),
    );
    assert_eq!(h.m.state(), MemberState::Closed);
}

/// A cooperative member that rejoins after generations went by without it (a static member's
/// heartbeats stalled while the group rebalanced and the broker kept it with its old
/// subscription) gives up what it owned as lost: another member may have been given it.
#[test]
fn a_rejoin_that_skipped_generations_loses_the_partitions_it_owned() {
    let c = config(None).with_assignor(super::assignor::CooperativeSticky);
    let mut h = Harness::with_config(c);
    let (joined, synced) = (coop_joined, coop_synced);
    h.subscribe_to_t();
    let (join, _) = h.expect_join();
    h.answer(&join, joined(1));
    let sync = h.one();
    h.answer(&sync, synced(&[0, 1]));
    assert_eq!(h.m.assignment().len(), 2);
    h.take_events();
    let hb = h.heartbeat();
    h.heartbeat_answer(&hb, 27);
    let (join, _) = h.expect_join();
    // Generation 2 formed without this member; it joins generation 3.
    h.answer(&join, joined(3));
    let sync = h.one();
    assert_eq!(
        h.m.assignment(),
        vec![],
        "kept partitions another member may own"
    );
    let lost: Vec<_> = h
        .take_events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Lost { partitions, .. } => Some(partitions),
            _ => None,
        })
        .collect();
    assert_eq!(
        lost,
        vec![vec![
            TopicPartition::new("t", 0),
            TopicPartition::new("t", 1)
        ]]
    );
    // The next generation in turn keeps them (cooperative): nothing lost.
    h.answer(&sync, synced(&[0]));
    let hb = h.heartbeat();
    h.heartbeat_answer(&hb, 27);
    let (join, _) = h.expect_join();
    h.answer(&join, joined(4));
    assert_eq!(h.m.assignment(), vec![TopicPartition::new("t", 0)]);
}

/// A JoinGroup answer of a follower "m-1" in a cooperative-sticky group at `generation`.
fn coop_joined(generation: i32) -> ResponseKind {
    ResponseKind::JoinGroup(
        JoinGroupResponse::default()
            .with_generation_id(generation)
            .with_protocol_type(Some(s("consumer")))
            .with_protocol_name(Some(s("cooperative-sticky")))
            .with_leader(s("leader-other"))
            .with_member_id(s("m-1")),
    )
}

/// A cooperative-sticky SyncGroup answer assigning t-`partitions`.
fn coop_synced(partitions: &[i32]) -> ResponseKind {
    let a = Assignment {
        partitions: partitions
            .iter()
            .map(|p| TopicPartition::new("t", *p))
            .collect(),
        user_data: None,
    };
    ResponseKind::SyncGroup(
        SyncGroupResponse::default()
            .with_protocol_type(Some(s("consumer")))
            .with_protocol_name(Some(s("cooperative-sticky")))
            .with_assignment(a.encode()),
    )
}

impl Harness {
    /// Answers the next FindCoordinator with `node`.
    fn find_coordinator_at(&mut self, node: i32) {
        let out = self.one();
        self.answer_find_coordinator(&out, node);
    }

    /// Answers the FindCoordinator `out` with `node`.
    fn answer_find_coordinator(&mut self, out: &Outbound, node: i32) {
        assert!(is_find_coordinator(out), "{out:?}");
        self.answer(out, find_coordinator_answer("g", node));
    }

    /// Stable at node 1, then its connection drops: the member looks the coordinator up again
    /// and finds `node`; returns the JoinGroup its next rejoin sends there.
    fn failed_over_to(node: i32) -> (Self, Outbound) {
        let mut h = Self::stable(Some("i1"), "i1-old");
        let hb = h.heartbeat();
        h.heartbeat_answer(&hb, 27); // REBALANCE_IN_PROGRESS: a rebalance starts
        let ticket = h.take_ticket();
        h.m.complete_revocation(ticket, h.now).unwrap();
        let (join, id) = h.expect_join();
        assert_eq!(id, "i1-old");
        h.join_ok(&join, "i1-old", 2, "other");
        let sync = h.one();
        assert!(matches!(body(&sync), RequestKind::SyncGroup(_)));
        // The coordinator dies with the SyncGroup in flight.
        h.m.handle_response(
            sync.id,
            Err(crate::error::TransportError::Disconnected {
                addr: "h:9093".into(),
                reason: "reset".into(),
            }),
            h.now,
        );
        h.advance(Duration::from_secs(2));
        h.find_coordinator_at(node);
        let (join, id) = h.expect_join();
        assert_eq!(id, "i1-old", "rejoins with the kept member id");
        assert!(
            matches!(&join.target, crate::request::Target::Coordinator(b) if b.node_id == node)
        );
        (h, join)
    }

    fn join_error(&mut self, out: &Outbound, code: i16) {
        self.answer(
            out,
            ResponseKind::JoinGroup(JoinGroupResponse::default().with_error_code(code)),
        );
    }
}

#[test]
fn the_first_fence_from_a_coordinator_that_took_over_is_forgiven_once() {
    // The new coordinator (node 2) loaded a record naming an older member id for "i1".
    let (mut h, join) = Harness::failed_over_to(2);
    h.join_error(&join, 82);
    assert_ne!(h.m.state(), MemberState::Fatal, "{:?}", h.m.fatal_error());
    let (join, id) = h.expect_join();
    assert!(
        !h.events.iter().any(|e| matches!(e, Event::Fatal(_))),
        "{:?}",
        h.events
    );
    assert_eq!(id, "", "takes the instance id back with an empty member id");
    // A second FENCED_INSTANCE_ID from the same coordinator is a live duplicate: terminal.
    h.join_error(&join, 82);
    assert_eq!(h.m.state(), MemberState::Fatal);
    assert!(matches!(
        h.m.fatal_error(),
        Some(GroupError::FencedInstanceId { .. })
    ));
}

#[cfg(feature = "sim")]
#[test]
fn without_the_failover_fence_rule_the_first_fence_from_a_new_coordinator_is_terminal() {
    // The simulation-only knob restores the earlier rule (tests/sim_failover_fence.rs).
    let (mut h, join) = Harness::failed_over_to(2);
    h.m.set_failover_fence_rule(false);
    h.join_error(&join, 82);
    assert_eq!(h.m.state(), MemberState::Fatal);
    assert!(matches!(
        h.m.fatal_error(),
        Some(GroupError::FencedInstanceId { .. })
    ));
}

#[test]
fn after_the_forgiven_fence_the_member_is_registered_by_the_new_coordinator() {
    let (mut h, join) = Harness::failed_over_to(2);
    h.join_error(&join, 82);
    let (join, id) = h.expect_join();
    assert_eq!(id, "");
    h.join_ok(&join, "i1-new", 5, "other");
    h.sync_ok(&[("t", 0)]);
    assert_eq!(h.m.state(), MemberState::Stable);
    // Another process takes the instance id at the coordinator that registered this member:
    // a genuine duplicate, terminal.
    let hb = h.heartbeat();
    h.heartbeat_answer(&hb, 82);
    assert_eq!(h.m.state(), MemberState::Fatal);
}

#[test]
fn a_fence_from_the_registering_coordinator_is_terminal_even_after_a_reconnect() {
    let mut h = Harness::stable(Some("i1"), "i1-abc");
    let hb = h.heartbeat();
    // The connection drops; the lookup names node 1 again, which never gave the group up.
    h.m.handle_response(
        hb.id,
        Err(crate::error::TransportError::Disconnected {
            addr: "h:9093".into(),
            reason: "reset".into(),
        }),
        h.now,
    );
    h.advance(Duration::from_secs(2));
    h.find_coordinator_at(1);
    let hb = h.heartbeat();
    h.heartbeat_answer(&hb, 82);
    assert_eq!(h.m.state(), MemberState::Fatal);
}

/// Found by tests/sim_random.rs seed 113449 (SIM_SEEDS=200000, with coordinator moves): the
/// group's partition moved away from node 1 and back (1 -> 2 -> 3 -> 1), node 1 loaded the
/// older registration from its log and fenced the live member, which stopped as if a duplicate
/// held its instance id. A NOT_COORDINATOR since the last join says the registering node gave
/// the group up: its next fence is forgiven once, a second one is terminal.
#[test]
fn a_coordinator_that_gave_the_group_up_and_took_it_back_is_forgiven_once() {
    let mut h = Harness::stable(Some("i1"), "i1-abc");
    let hb = h.heartbeat();
    h.heartbeat_answer(&hb, 16); // NOT_COORDINATOR; later the lookup names node 1 again
    h.advance(Duration::from_secs(2));
    h.find_coordinator_at(1);
    let hb = h.heartbeat();
    h.heartbeat_answer(&hb, 82);
    assert_ne!(h.m.state(), MemberState::Fatal, "{:?}", h.m.fatal_error());
    let (join, id) = h.expect_join();
    assert_eq!(id, "", "takes the instance id back with an empty member id");
    h.join_error(&join, 82);
    assert_eq!(
        h.m.state(),
        MemberState::Fatal,
        "a second fence is terminal"
    );
}

#[test]
fn an_empty_id_join_that_never_left_is_not_in_doubt() {
    let mut h = Harness::new(Some("i1"));
    h.subscribe_to_t();
    let (join, id) = h.expect_join();
    assert_eq!(id, "");
    // The coordinator's broker refused the connection: the join never reached it.
    h.m.handle_response(
        join.id,
        Err(crate::error::TransportError::Connect {
            addr: "h:9093".into(),
            reason: "Connection refused".into(),
        }),
        h.now,
    );
    h.advance(Duration::from_secs(2));
    h.find_coordinator_at(2);
    // No quarantine of a JoinGroup timeout (max.poll.interval.ms + 5 s = 35 s here): the next
    // empty-id join goes out after the retry backoff.
    h.advance(Duration::from_secs(1));
    let (join, id) = h.expect_join();
    assert_eq!(id, "");
    h.join_ok(&join, "i1-x", 1, "other");
    h.sync_ok(&[("t", 0)]);
    // And a FENCED_INSTANCE_ID later is not forgiven as a late landing of that join.
    let hb = h.heartbeat();
    h.heartbeat_answer(&hb, 82);
    assert_eq!(h.m.state(), MemberState::Fatal);
}

#[test]
fn a_late_failure_of_a_request_to_the_dead_coordinator_keeps_the_new_one() {
    let mut h = Harness::stable(Some("i1"), "i1-abc");
    h.m.commit(
        vec![CommitOffset {
            partition: TopicPartition::new("t", 0),
            offset: 5,
            metadata: None,
        }],
        h.now,
    );
    let commit = h.one();
    assert!(matches!(body(&commit), RequestKind::OffsetCommit(_)));
    let hb = h.heartbeat();
    let dead = crate::error::TransportError::Connect {
        addr: "h:9092".into(),
        reason: "Connection refused".into(),
    };
    h.m.handle_response(hb.id, Err(dead.clone()), h.now);
    h.advance(Duration::from_secs(1));
    h.find_coordinator_at(2);
    assert_eq!(h.m.coordinator().map(|b| b.node_id), Some(2));
    // The commit that went to node 1 fails only now.
    h.m.handle_response(commit.id, Err(dead), h.now);
    assert_eq!(h.m.coordinator().map(|b| b.node_id), Some(2));
    assert!(
        h.drain()
            .iter()
            .all(|o| !matches!(o.request, Request::FindCoordinator { .. })),
        "no new lookup for a failure of the old coordinator"
    );
}

#[test]
fn a_dynamic_member_is_never_forgiven_a_fence_it_has_no_instance_id_for() {
    let mut h = Harness::stable(None, "m-1");
    let hb = h.heartbeat();
    h.heartbeat_answer(&hb, 16); // NOT_COORDINATOR: the coordinator moved to node 2
    h.advance(Duration::from_secs(2));
    h.find_coordinator_at(2);
    let hb = h.heartbeat();
    h.heartbeat_answer(&hb, 82);
    assert_eq!(h.m.state(), MemberState::Fatal);
}

#[test]
fn the_member_fits_its_requests_to_older_versions() {
    let mut h = Harness::new(Some("i1"));
    h.subscribe_to_t();
    let (join, _) = h.expect_join();
    let reason = |v| match join.request.build(v).unwrap() {
        RequestBody::Kafka(RequestKind::JoinGroup(j)) => j.reason,
        other => panic!("{other:?}"),
    };
    assert!(reason(8).is_some(), "JoinGroup v8+ carries a reason");
    assert_eq!(reason(7), None, "below v8 the reason is cleared");
    h.join_ok(&join, "i1-abc", 1, "other");
    let sync = h.one();
    let protocol = |v| match sync.request.build(v).unwrap() {
        RequestBody::Kafka(RequestKind::SyncGroup(s)) => (s.protocol_type, s.protocol_name),
        other => panic!("{other:?}"),
    };
    assert!(
        protocol(5).0.is_some(),
        "SyncGroup v5 carries the protocol type"
    );
    assert_eq!(
        protocol(4),
        (None, None),
        "below v5 (KIP-559) it is cleared"
    );
    let mut h = Harness::stable(None, "m-1");
    h.m.close(CloseOptions::LeaveGroup, h.now);
    let leave = h.one();
    let reason = |v| match leave.request.build(v).unwrap() {
        RequestBody::Kafka(RequestKind::LeaveGroup(l)) => l.members[0].reason.clone(),
        other => panic!("{other:?}"),
    };
    assert!(
        reason(5).is_some(),
        "LeaveGroup v5 carries a reason per member"
    );
    assert_eq!(reason(4), None);
}

/// One call of an assignor: the partition counts and the member ids it was given.
type AssignCall = (std::collections::BTreeMap<String, i32>, Vec<String>);

/// An application's own assignor: everything to the member with the greatest member id. It
/// records the input of every call.
#[derive(Debug, Default)]
struct LastTakesAll {
    calls: std::sync::Mutex<Vec<AssignCall>>,
}

impl super::assignor::Assignor for LastTakesAll {
    fn name(&self) -> &str {
        "last-takes-all"
    }

    fn protocol(&self) -> super::assignor::RebalanceProtocol {
        super::assignor::RebalanceProtocol::Eager
    }

    fn assign(
        &self,
        partitions: &std::collections::BTreeMap<String, i32>,
        members: &[super::assignor::MemberMetadata],
    ) -> std::collections::BTreeMap<String, Vec<TopicPartition>> {
        let ids: Vec<String> = members.iter().map(|m| m.member_id.clone()).collect();
        self.calls
            .lock()
            .unwrap()
            .push((partitions.clone(), ids.clone()));
        let last = ids.iter().max().cloned().unwrap_or_default();
        let all = partitions
            .iter()
            .flat_map(|(t, n)| (0..*n).map(|p| TopicPartition::new(t.as_str(), p)))
            .collect();
        std::collections::BTreeMap::from([(last, all)])
    }
}

#[test]
fn a_custom_assignor_is_offered_in_join_group_and_assigns_when_leader() {
    let custom = std::sync::Arc::new(LastTakesAll::default());
    let c = config(Some("i1")).with_assignors([
        custom.clone() as std::sync::Arc<dyn super::assignor::Assignor>,
        std::sync::Arc::new(super::assignor::Range),
    ]);
    let mut h = Harness::with_config(c);
    h.subscribe_to_t();
    let (join, _) = h.expect_join();
    let RequestKind::JoinGroup(j) = body(&join) else {
        unreachable!()
    };
    let offered: Vec<(String, Vec<String>)> = j
        .protocols
        .iter()
        .map(|p| {
            let sub = Subscription::decode(&p.metadata).unwrap();
            (p.name.to_string(), sub.topics)
        })
        .collect();
    let t = vec!["t".to_string()];
    assert_eq!(
        offered,
        [("last-takes-all".into(), t.clone()), ("range".into(), t)],
        "the custom assignor is offered first, with the member's subscription"
    );

    // The group picks the custom assignor and makes this member the leader.
    let members = ["i1-abc", "i2-def"]
        .into_iter()
        .map(|m| {
            JoinGroupResponseMember::default()
                .with_member_id(s(m))
                .with_metadata(Subscription::new(["t"]).encode())
        })
        .collect();
    h.answer(
        &join,
        ResponseKind::JoinGroup(
            JoinGroupResponse::default()
                .with_generation_id(1)
                .with_protocol_type(Some(s("consumer")))
                .with_protocol_name(Some(s("last-takes-all")))
                .with_leader(s("i1-abc"))
                .with_member_id(s("i1-abc"))
                .with_members(members),
        ),
    );
    let sg = h.leader_sync(3);
    let plan: Vec<(String, Vec<TopicPartition>)> = sg
        .assignments
        .iter()
        .map(|a| {
            let partitions = Assignment::decode(&a.assignment).unwrap().partitions;
            (a.member_id.to_string(), partitions)
        })
        .collect();
    assert_eq!(
        plan,
        [
            ("i1-abc".into(), vec![]),
            (
                "i2-def".into(),
                (0..3).map(|p| TopicPartition::new("t", p)).collect()
            ),
        ],
        "the custom assignor's plan (range would have split t 2/1)"
    );
    let calls = custom.calls.lock().unwrap();
    assert_eq!(
        *calls,
        [(
            std::collections::BTreeMap::from([("t".to_string(), 3)]),
            vec!["i1-abc".to_string(), "i2-def".to_string()]
        )],
        "called once, with the partition counts and every member"
    );
}

/// A join answered successfully after the member stopped waiting for it (it unsubscribed
/// meanwhile) still registered the member id it holds at that coordinator, after the
/// coordinator's unload: a later FENCED_INSTANCE_ID from it is a genuine duplicate, not a
/// stale registration loaded in a failover, so it is terminal (found by tests/op_sequences.rs).
#[test]
fn a_late_successful_join_for_the_held_id_makes_the_next_fence_terminal() {
    let mut h = Harness::stable(Some("i1"), "i1-abc");
    let hb = h.heartbeat();
    h.heartbeat_answer(&hb, codes::COORDINATOR_NOT_AVAILABLE);
    h.advance(Duration::from_secs(1));
    h.find_coordinator_at(1);
    let hb = h.one();
    assert!(matches!(body(&hb), RequestKind::Heartbeat(_)), "{hb:?}");
    h.heartbeat_answer(&hb, codes::NONE);
    h.m.subscribe(["t".to_string(), "u".to_string()], h.now)
        .unwrap();
    let ticket = h.take_ticket();
    h.m.complete_revocation(ticket, h.now).unwrap();
    let (join, id) = h.expect_join();
    assert_eq!(id, "i1-abc");
    h.m.unsubscribe(h.now);
    h.join_ok(&join, "i1-abc", 2, "other");
    assert_eq!(h.m.state(), MemberState::Unsubscribed);
    h.m.subscribe(["t".to_string()], h.now).unwrap();
    let (join, id) = h.expect_join();
    assert_eq!(id, "i1-abc");
    h.join_error(&join, codes::FENCED_INSTANCE_ID);
    assert_eq!(h.m.state(), MemberState::Fatal, "{:?}", h.take_events());
    assert!(matches!(
        h.m.fatal_error(),
        Some(GroupError::FencedInstanceId { .. })
    ));
}
