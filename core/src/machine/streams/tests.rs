//! Sans-IO tests of the streams member and the per-process task guard: identity rules, the
//! join and heartbeat field diffing, reconciliation, errors, and the guard's safety and liveness
//! (the shape of KAFKA-21401's step 8).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartitions, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    GroupId, OffsetCommitRequest, OffsetFetchResponse, RequestKind, ResponseKind, TopicName,
};

use super::*;
use crate::config::GroupConfig;
use crate::error::{ApiMisuse, GroupError, TransportError, codes};
use crate::machine::TopicPartition;
use crate::machine::events::{
    CloseOptions, CommitError, CommitId, CommitOffset, FetchId, MemberState, Reason, RevokeTicket,
};
use crate::machine::test_support::{
    self, Heartbeats, ID, epoch_config, is_find_coordinator, picked, s,
};
use crate::machine::timer::Timer;
use crate::member_id::MemberId;
use crate::messages::streams_group_describe_response as desc;
use crate::messages::streams_group_heartbeat_response as resp;
use crate::messages::{
    StreamsGroupDescribeResponse, StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse,
};
use crate::request::{Api, Outbound, Request, ResponseBody, Target};

const PID: &str = "6c1b4a52-1f9d-4a53-9bb0-0d5f0f6a7e11";

type Harness = test_support::Harness<StreamsMember>;

fn task(sub: &str, p: i32) -> TaskId {
    TaskId::new(sub, p)
}

fn set(ts: &[(&str, i32)]) -> BTreeSet<TaskId> {
    ts.iter().map(|(s, p)| task(s, *p)).collect()
}

fn tasks(active: &[(&str, i32)], standby: &[(&str, i32)], warmup: &[(&str, i32)]) -> StreamsTasks {
    StreamsTasks {
        active: set(active),
        standby: set(standby),
        warmup: set(warmup),
    }
}

fn config(instance: Option<&str>) -> GroupConfig {
    let mut c = epoch_config("app", instance);
    c.rack_id = Some("rack-a".into());
    c
}

/// Two subtopologies: "0" reads `in-a` and `in-b` (copartitioned) and keeps a store; "1" reads
/// the repartition topic "0" writes.
fn topology() -> StreamsTopology {
    let mut sub0 = Subtopology::new("0", ["in-b", "in-a"]).with_changelog(InternalTopic {
        name: "app-store-changelog".into(),
        partitions: Some(99),
        replication_factor: Some(3),
        configs: BTreeMap::from([("cleanup.policy".into(), "compact".into())]),
    });
    sub0.repartition_sink_topics.insert("app-rep".into());
    sub0.copartition_groups
        .push(BTreeSet::from(["in-a".to_string(), "in-b".to_string()]));
    let sub1 = Subtopology::new("1", Vec::<String>::new()).with_repartition_source(InternalTopic {
        name: "app-rep".into(),
        partitions: Some(4),
        replication_factor: None,
        configs: BTreeMap::new(),
    });
    StreamsTopology::new(7, vec![sub1, sub0])
}

fn streams_config() -> StreamsConfig {
    let mut c = StreamsConfig::new(topology());
    c.client_tags.insert("zone".into(), "z1".into());
    c
}

fn process() -> StreamsProcess {
    StreamsProcess::new(PID, Some(UserEndpoint::new("10.0.0.7", 8080)))
}

fn find_coordinator_answer() -> ResponseKind {
    test_support::find_coordinator_answer("app", 1)
}

fn task_ids(ts: &[(&str, i32)]) -> Vec<resp::TaskIds> {
    let mut by: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (sub, p) in ts {
        by.entry(sub).or_default().push(*p);
    }
    by.into_iter()
        .map(|(sub, ps)| {
            resp::TaskIds::default()
                .with_subtopology_id(s(sub))
                .with_partitions(ps)
        })
        .collect()
}

/// A successful answer at `epoch`, with a 1 s heartbeat interval and a 5 s task-offset
/// interval, and the target `t` if any.
fn ok(epoch: i32, t: Option<&StreamsTasks>) -> StreamsGroupHeartbeatResponse {
    let mut r = StreamsGroupHeartbeatResponse::default()
        .with_member_id(s(ID))
        .with_member_epoch(epoch)
        .with_heartbeat_interval_ms(1000)
        .with_task_offset_interval_ms(5000)
        .with_acceptable_recovery_lag(100);
    if let Some(t) = t {
        let list = |set: &BTreeSet<TaskId>| {
            let v: Vec<(String, i32)> = set
                .iter()
                .map(|t| (t.subtopology.clone(), t.partition))
                .collect();
            let v: Vec<(&str, i32)> = v.iter().map(|(a, b)| (a.as_str(), *b)).collect();
            task_ids(&v)
        };
        r = r
            .with_active_tasks(Some(list(&t.active)))
            .with_standby_tasks(Some(list(&t.standby)))
            .with_warmup_tasks(Some(list(&t.warmup)));
    }
    r
}

fn err(code: i16) -> StreamsGroupHeartbeatResponse {
    StreamsGroupHeartbeatResponse::default()
        .with_error_code(code)
        .with_member_id(s(ID))
}

/// The coordinator's record of this member as StreamsGroupDescribe gives it: `epoch` and
/// current assignment `t`, in group "app" beside another member.
fn described(epoch: i32, t: &StreamsTasks) -> ResponseBody {
    let list = |set: &BTreeSet<TaskId>| {
        let mut by: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for t in set {
            by.entry(t.subtopology.as_str())
                .or_default()
                .push(t.partition);
        }
        by.into_iter()
            .map(|(sub, ps)| {
                desc::TaskIds::default()
                    .with_subtopology_id(s(sub))
                    .with_partitions(ps)
            })
            .collect::<Vec<_>>()
    };
    let assignment = desc::Assignment::default()
        .with_active_tasks(list(&t.active))
        .with_standby_tasks(list(&t.standby))
        .with_warmup_tasks(list(&t.warmup));
    let me = desc::Member::default()
        .with_member_id(s(ID))
        .with_member_epoch(epoch)
        .with_assignment(assignment);
    let other = desc::Member::default()
        .with_member_id(s("AAAAAAAAAAAAAAAAAAAAAA"))
        .with_member_epoch(epoch + 1);
    described_group(desc::DescribedGroup::default().with_members(vec![other, me]))
}

fn described_group(g: desc::DescribedGroup) -> ResponseBody {
    ResponseBody::StreamsGroupDescribe(
        StreamsGroupDescribeResponse::default()
            .with_groups(vec![g.with_group_id(GroupId(s("app")))]),
    )
}

/// Whether `out` reads this member's group back (StreamsGroupDescribe of "app").
fn is_read_back(out: &Outbound) -> bool {
    matches!(&out.request, Request::StreamsGroupDescribe { body, .. }
        if body.group_ids.len() == 1 && body.group_ids[0].0.as_str() == "app")
        && matches!(out.target, Target::Coordinator(_))
}

fn hb_body(out: &Outbound) -> StreamsGroupHeartbeatRequest {
    StreamsMember::heartbeat_of(out)
}

/// The owned tasks a heartbeat lists, `None` when left out (all three lists go together).
fn owned_of(b: &StreamsGroupHeartbeatRequest) -> Option<StreamsTasks> {
    let read = |l: &Option<Vec<crate::messages::streams_group_heartbeat_request::TaskIds>>| {
        l.as_ref().map(|ts| {
            ts.iter()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .map(|p| TaskId::new(t.subtopology_id.to_string(), *p))
                })
                .collect::<BTreeSet<_>>()
        })
    };
    let (a, s, w) = (
        read(&b.active_tasks),
        read(&b.standby_tasks),
        read(&b.warmup_tasks),
    );
    assert_eq!(a.is_some(), s.is_some(), "{b:?}");
    assert_eq!(a.is_some(), w.is_some(), "{b:?}");
    Some(StreamsTasks {
        active: a?,
        standby: s?,
        warmup: w?,
    })
}

impl Harness {
    fn build(instance: Option<&str>, process: StreamsProcess, id: MemberId) -> Self {
        Self::start(|now| {
            StreamsMember::with_member_id(config(instance), streams_config(), process, id, now)
                .unwrap()
        })
    }

    fn new(instance: Option<&str>) -> Self {
        Self::build(instance, process(), MemberId::parse(ID).unwrap())
    }

    /// A member with `config` and this file's topology and process.
    fn with_group(config: GroupConfig) -> Self {
        Self::start(|now| {
            StreamsMember::with_member_id(
                config,
                streams_config(),
                process(),
                MemberId::parse(ID).unwrap(),
                now,
            )
            .unwrap()
        })
    }

    fn find_coordinator(&mut self) {
        let fc = self.one();
        assert!(is_find_coordinator(&fc), "{fc:?}");
        self.answer_lookup(&fc, "app");
    }

    /// The events so far (requests stay queued).
    fn take_events(&mut self) -> Vec<StreamsEvent> {
        self.collect_events();
        std::mem::take(&mut self.events)
    }

    /// Joins and goes to Stable at epoch 1 holding `t` (acknowledged). Events so far are
    /// discarded.
    fn joined_with(mut self, t: &StreamsTasks) -> Self {
        self.m.join(self.now).unwrap();
        self.find_coordinator();
        let (join, b) = self.expect_hb();
        assert_eq!(b.member_epoch, 0);
        self.hb_answer(&join, ok(1, Some(t)));
        if !t.is_empty() {
            let (ack, b) = self.expect_hb();
            assert_eq!(owned_of(&b).as_ref(), Some(t));
            self.hb_answer(&ack, ok(1, None));
        }
        self.nothing("nothing more once the assignment is acknowledged");
        assert_eq!(self.m.state(), MemberState::Stable);
        assert_eq!(self.m.tasks(), t);
        self.events.clear();
        self
    }

    fn joined(instance: Option<&str>, t: &StreamsTasks) -> Self {
        Self::new(instance).joined_with(t)
    }
}

fn fatal_of(events: &[StreamsEvent]) -> Vec<&GroupError> {
    picked!(events, StreamsEvent::Fatal(e) => e)
}

fn lost_of(events: &[StreamsEvent]) -> Vec<(StreamsTasks, Reason)> {
    picked!(events, StreamsEvent::TasksLost { tasks, reason } => (tasks.clone(), *reason))
}

fn assigned_of(events: &[StreamsEvent]) -> Vec<(StreamsTasks, StreamsTasks)> {
    picked!(
        events,
        StreamsEvent::TasksAssigned { added, owned, .. } => (added.clone(), owned.clone())
    )
}

fn released_of(events: &[StreamsEvent]) -> Vec<(StreamsTasks, ReleaseReason)> {
    picked!(events, StreamsEvent::TasksReleased { tasks, reason, .. } => (tasks.clone(), *reason))
}

fn take_revoking(events: &mut Vec<StreamsEvent>) -> (Vec<TaskId>, RevokeTicket) {
    let i = events
        .iter()
        .position(|e| matches!(e, StreamsEvent::TasksRevoking { .. }))
        .unwrap_or_else(|| panic!("no TasksRevoking in {events:?}"));
    match events.remove(i) {
        StreamsEvent::TasksRevoking { active, ticket } => (active, ticket),
        _ => unreachable!(),
    }
}

// ---------------------------------------------------------------------------------- the join

#[test]
fn the_join_declares_topology_process_endpoint_tags_rack_and_timeout() {
    let mut h = Harness::new(Some("i-1"));
    h.m.set_task_offsets(
        BTreeMap::from([(task("0", 1), 40)]),
        BTreeMap::from([(task("0", 1), 50)]),
    );
    h.m.join(h.now).unwrap();
    h.find_coordinator();
    let (out, b) = h.expect_hb();
    assert!(matches!(out.target, Target::Coordinator(_)));
    assert_eq!(out.request.api_key(), Api::STREAMS_GROUP_HEARTBEAT);
    assert_eq!(out.request.versions(), 0..=1);
    assert_eq!(b.group_id.0.as_str(), "app");
    assert_eq!(b.member_id.as_str(), ID);
    assert_eq!(b.member_epoch, 0);
    assert_eq!(b.endpoint_information_epoch, -1);
    assert_eq!(b.instance_id.as_deref(), Some("i-1"));
    assert_eq!(b.rack_id.as_deref(), Some("rack-a"));
    assert_eq!(b.rebalance_timeout_ms, 30_000);
    assert_eq!(b.process_id.as_deref(), Some(PID));
    let ep = b.user_endpoint.as_ref().unwrap();
    assert_eq!((ep.host.as_str(), ep.port), ("10.0.0.7", 8080));
    let tags = b.client_tags.as_ref().unwrap();
    assert_eq!(tags.len(), 1);
    assert_eq!(
        (tags[0].key.as_str(), tags[0].value.as_str()),
        ("zone", "z1")
    );
    assert_eq!(owned_of(&b), Some(StreamsTasks::default()));
    assert_eq!(b.task_offsets.as_ref().map(|v| v.len()), Some(1));
    assert_eq!(b.task_end_offsets.as_ref().unwrap()[0].offset, 50);
    assert!(!b.shutdown_application);
    let t = b.topology.as_ref().unwrap();
    assert_eq!(t.epoch, 7);
    let ids: Vec<&str> = t
        .subtopologies
        .iter()
        .map(|s| s.subtopology_id.as_str())
        .collect();
    assert_eq!(ids, ["0", "1"], "sorted by id");
    let s0 = &t.subtopologies[0];
    let names: Vec<&str> = s0.source_topics.iter().map(|t| t.0.as_str()).collect();
    assert_eq!(names, ["in-a", "in-b"]);
    assert_eq!(s0.repartition_sink_topics[0].0.as_str(), "app-rep");
    let cl = &s0.state_changelog_topics[0];
    assert_eq!(
        (cl.name.0.as_str(), cl.partitions, cl.replication_factor),
        ("app-store-changelog", 0, 3),
        "a changelog's partition count is the coordinator's"
    );
    assert_eq!(cl.topic_configs[0].key.as_str(), "cleanup.policy");
    assert_eq!(s0.copartition_groups.len(), 1);
    assert_eq!(s0.copartition_groups[0].source_topics, vec![0, 1]);
    let s1 = &t.subtopologies[1];
    let rs = &s1.repartition_source_topics[0];
    assert_eq!(
        (rs.name.0.as_str(), rs.partitions, rs.replication_factor),
        ("app-rep", 4, -1),
        "no replication factor is the broker's default, -1 as Kafka Streams sends it"
    );
}

#[test]
fn a_topology_that_cannot_go_on_the_wire_is_refused_at_construction() {
    let now = crate::testutil::epoch();
    let id = MemberId::parse(ID).unwrap();
    let empty = StreamsConfig::new(StreamsTopology::new(1, vec![]));
    let e = StreamsMember::with_member_id(config(None), empty, process(), id, now).unwrap_err();
    assert_eq!(e.key, "topology");
    let mut bad = topology();
    bad.subtopologies[1]
        .copartition_groups
        .push(BTreeSet::from(["nope".to_string()]));
    let e =
        StreamsMember::with_member_id(config(None), StreamsConfig::new(bad), process(), id, now)
            .unwrap_err();
    assert!(e.rule.contains("nope"), "{e}");
    let dup = StreamsTopology::new(
        1,
        vec![Subtopology::new("0", ["a"]), Subtopology::new("0", ["b"])],
    );
    assert!(dup.validate().is_err());
}

// ---------------------------------------------------------------------------- identity rules

#[test]
fn the_member_id_comes_from_the_config_or_the_seed_and_never_changes() {
    let now = crate::testutil::epoch();
    let m = StreamsMember::new(config(None), streams_config(), process(), now).unwrap();
    assert_eq!(m.member_id(), MemberId::from_seed(1).as_str());
    let mut c = config(None);
    c.member_id = Some(MemberId::parse(ID).unwrap());
    let m = StreamsMember::new(c, streams_config(), process(), now).unwrap();
    assert_eq!(m.member_id(), ID);
    let mut c = config(None);
    c.seed = None;
    assert!(StreamsMember::new(c, streams_config(), process(), now).is_err());
}

#[test]
fn a_join_whose_answer_is_lost_is_retried_with_the_same_id_at_epoch_0() {
    let mut h = Harness::new(None);
    h.m.join(h.now).unwrap();
    h.find_coordinator();
    let (join, _) = h.expect_hb();
    h.fail(&join);
    // The coordinator is looked up again, then the join goes again after the backoff.
    h.find_coordinator();
    h.advance(Duration::from_secs(1));
    let (retry, b) = h.expect_hb();
    assert_eq!((b.member_id.as_str(), b.member_epoch), (ID, 0));
    assert!(b.topology.is_some(), "a retried join is a full join");
    h.hb_answer(&retry, ok(1, Some(&StreamsTasks::default())));
    assert_eq!(h.m.epoch(), 1);
    assert_eq!(h.m.member_id(), ID);
}

#[test]
fn fencing_and_unknown_member_id_rejoin_at_epoch_0_with_the_same_id() {
    for code in [codes::FENCED_MEMBER_EPOCH, codes::UNKNOWN_MEMBER_ID] {
        let t = tasks(&[("0", 0)], &[("1", 1)], &[]);
        let mut h = Harness::joined(None, &t);
        h.advance(Duration::from_secs(1));
        let (hb, _) = h.expect_hb();
        h.hb_answer(&hb, err(code));
        let ev = h.take_events();
        let lost = lost_of(&ev);
        assert_eq!(lost.len(), 1, "{ev:?}");
        assert_eq!(lost[0].0, t);
        assert!(lost[0].1.is_fencing());
        assert!(h.m.tasks().is_empty());
        assert!(
            h.m.process().holders(&task("0", 0)).is_empty(),
            "released in the guard"
        );
        h.advance(Duration::from_secs(1));
        let (_, b) = h.expect_hb();
        assert_eq!(
            (b.member_id.as_str(), b.member_epoch),
            (ID, 0),
            "code {code}"
        );
        assert!(b.topology.is_some() && b.process_id.is_some());
    }
}

#[test]
fn close_before_the_first_answer_still_sends_the_leave_with_the_id() {
    for (instance, epoch) in [(None, -1), (Some("i-1"), -2)] {
        let mut h = Harness::new(instance);
        h.m.join(h.now).unwrap();
        h.find_coordinator();
        let (_join, _) = h.expect_hb();
        h.m.close(CloseOptions::Default, h.now);
        let (leave, b) = h.expect_hb();
        assert_eq!((b.member_id.as_str(), b.member_epoch), (ID, epoch));
        assert!(b.topology.is_none());
        h.hb_answer(&leave, ok(epoch, None));
        assert_eq!(h.m.state(), MemberState::Closed);
        assert!(h.take_events().contains(&StreamsEvent::Closed));
    }
}

#[test]
fn leave_epochs_follow_static_membership_and_the_close_options() {
    let cases: [(Option<&str>, CloseOptions, Option<i32>); 6] = [
        (None, CloseOptions::Default, Some(-1)),
        (Some("i"), CloseOptions::Default, Some(-2)),
        (None, CloseOptions::LeaveGroup, Some(-1)),
        (Some("i"), CloseOptions::LeaveGroup, Some(-1)),
        (None, CloseOptions::RemainInGroup, None),
        (Some("i"), CloseOptions::RemainInGroup, Some(-2)),
    ];
    for (instance, options, want) in cases {
        let t = tasks(&[("0", 0)], &[], &[]);
        let mut h = Harness::joined(instance, &t);
        h.m.close(options, h.now);
        let out = h.drain();
        match want {
            Some(epoch) => {
                assert_eq!(out.len(), 1, "{instance:?} {options:?}");
                let b = hb_body(&out[0]);
                assert_eq!((b.member_id.as_str(), b.member_epoch), (ID, epoch));
                assert_eq!(b.instance_id.as_deref(), instance);
                h.hb_answer(&out[0], ok(epoch, None));
            }
            None => assert!(out.is_empty(), "{out:?}"),
        }
        let ev = h.take_events();
        assert_eq!(released_of(&ev), vec![(t.clone(), ReleaseReason::Leaving)]);
        assert_eq!(h.m.state(), MemberState::Closed, "{instance:?} {options:?}");
        assert!(h.m.process().holders(&task("0", 0)).is_empty());
    }
}

#[test]
fn leave_group_sends_minus_1_for_a_static_member_and_a_rejoin_keeps_the_id() {
    let t = tasks(&[("0", 0)], &[], &[]);
    let mut h = Harness::joined(Some("i"), &t);
    h.m.leave_group(h.now);
    let (leave, b) = h.expect_hb();
    assert_eq!(b.member_epoch, -1);
    h.hb_answer(&leave, ok(-1, None));
    assert_eq!(h.m.state(), MemberState::Unsubscribed);
    // Unsubscribe of a static member: -2, and the rejoin is epoch 0 with the instance id.
    h.m.join(h.now).unwrap();
    let (join, b) = h.expect_hb();
    assert_eq!(
        (
            b.member_id.as_str(),
            b.member_epoch,
            b.instance_id.as_deref()
        ),
        (ID, 0, Some("i"))
    );
    h.hb_answer(&join, ok(3, Some(&t)));
    let (ack, _) = h.expect_hb();
    h.hb_answer(&ack, ok(3, None));
    h.m.unsubscribe(h.now);
    let (leave, b) = h.expect_hb();
    assert_eq!((b.member_id.as_str(), b.member_epoch), (ID, -2));
    h.hb_answer(&leave, ok(-2, None));
    assert_eq!(h.m.state(), MemberState::Unsubscribed);
    assert_eq!(h.m.member_id(), ID);
}

#[test]
fn unreleased_instance_id_after_an_own_lost_join_leaves_with_minus_2_and_rejoins_bounded() {
    // Without the wait for a release, the member stops once the recoveries are spent.
    let mut h = Harness::with_group(config(Some("i")).with_unreleased_instance_margin(None));
    h.m.join(h.now).unwrap();
    h.find_coordinator();
    let (join, _) = h.expect_hb();
    h.fail(&join); // the join may have landed
    h.find_coordinator();
    for round in 0..UNRELEASED_RECOVERIES {
        h.advance(Duration::from_secs(2));
        let (join, b) = h.expect_hb();
        assert_eq!(b.member_epoch, 0, "round {round}");
        h.hb_answer(&join, err(codes::UNRELEASED_INSTANCE_ID));
        let (leave, b) = h.expect_hb();
        assert_eq!((b.member_id.as_str(), b.member_epoch), (ID, -2));
        // Unknown to the broker: the release did nothing; it counts.
        h.hb_answer(&leave, err(codes::UNKNOWN_MEMBER_ID));
        assert_eq!(h.m.state(), MemberState::Joining);
    }
    h.advance(Duration::from_secs(2));
    let (join, _) = h.expect_hb();
    h.hb_answer(&join, err(codes::UNRELEASED_INSTANCE_ID));
    let ev = h.take_events();
    assert!(
        matches!(fatal_of(&ev)[..], [GroupError::UnreleasedInstanceId { .. }]),
        "{ev:?}"
    );
}

#[test]
fn an_accepted_minus_2_leave_does_not_count_against_the_recovery_bound() {
    let mut h = Harness::new(Some("i"));
    h.m.join(h.now).unwrap();
    h.find_coordinator();
    let (join, _) = h.expect_hb();
    h.fail(&join);
    h.find_coordinator();
    for _ in 0..UNRELEASED_RECOVERIES + 2 {
        h.advance(Duration::from_secs(2));
        let (join, _) = h.expect_hb();
        h.hb_answer(&join, err(codes::UNRELEASED_INSTANCE_ID));
        let (leave, _) = h.expect_hb();
        h.hb_answer(&leave, ok(-2, None));
    }
    assert!(h.m.fatal_error().is_none(), "{:?}", h.m.fatal_error());
}

/// A restarted static streams member with a new member id meets its crashed incarnation's
/// registration: it says so once, sends no leave, rejoins with backoff, and is in once the
/// coordinator released the instance id.
#[test]
fn unreleased_instance_id_for_a_member_that_cannot_have_joined_waits_for_the_release() {
    let mut h = Harness::new(Some("i"));
    h.m.join(h.now).unwrap();
    h.find_coordinator();
    let (join, _) = h.expect_hb();
    h.hb_answer(&join, err(codes::UNRELEASED_INSTANCE_ID));
    let ev = h.take_events();
    assert!(fatal_of(&ev).is_empty(), "{ev:?}");
    let held: Vec<_> = ev
        .iter()
        .filter(|e| matches!(e, StreamsEvent::InstanceHeld { instance_id, limit } if instance_id == "i" && *limit == Duration::from_secs(55)))
        .collect();
    assert_eq!(held.len(), 1, "{ev:?}");
    h.nothing("no leave: nothing of this member holds the instance id");
    for _ in 0..5 {
        h.m.poll(h.now);
        h.advance(Duration::from_secs(1));
        let (join, b) = h.expect_hb();
        assert_eq!((b.member_id.as_str(), b.member_epoch), (ID, 0));
        h.hb_answer(&join, err(codes::UNRELEASED_INSTANCE_ID));
    }
    h.advance(Duration::from_secs(1));
    let (join, _) = h.expect_hb();
    h.hb_answer(&join, ok(1, Some(&tasks(&[("0", 0)], &[], &[]))));
    assert_eq!(h.m.epoch(), 1);
    assert!(h.m.fatal_error().is_none());
}

/// A streams member id kept from the crashed incarnation releases its registration at once.
#[test]
fn a_kept_member_id_rejoins_after_a_minus_2_leave_of_its_own() {
    let mut h =
        Harness::with_group(config(Some("i")).with_kept_member_id(MemberId::parse(ID).unwrap()));
    h.m.join(h.now).unwrap();
    h.find_coordinator();
    let (join, _) = h.expect_hb();
    h.hb_answer(&join, err(codes::UNRELEASED_INSTANCE_ID));
    let (leave, b) = h.expect_hb();
    assert_eq!((b.member_id.as_str(), b.member_epoch), (ID, -2));
    h.hb_answer(&leave, ok(-2, None));
    let (join, b) = h.expect_hb();
    assert_eq!((b.member_id.as_str(), b.member_epoch), (ID, 0));
    h.hb_answer(&join, ok(4, Some(&tasks(&[("0", 0)], &[], &[]))));
    assert_eq!(h.m.epoch(), 4);
    let ev = h.take_events();
    assert!(
        !ev.iter()
            .any(|e| matches!(e, StreamsEvent::InstanceHeld { .. })),
        "{ev:?}"
    );
}

#[test]
fn unreleased_instance_id_for_a_member_that_cannot_have_joined_without_a_wait_is_fatal_at_once() {
    let mut h = Harness::with_group(config(Some("i")).with_unreleased_instance_margin(None));
    h.m.join(h.now).unwrap();
    h.find_coordinator();
    let (join, _) = h.expect_hb();
    h.hb_answer(&join, err(codes::UNRELEASED_INSTANCE_ID));
    let ev = h.take_events();
    assert!(
        matches!(fatal_of(&ev)[..], [GroupError::UnreleasedInstanceId { .. }]),
        "{ev:?}"
    );
}

// ------------------------------------------------------------------------- heartbeat fields

#[test]
fn later_heartbeats_carry_only_what_changed_and_everything_after_a_failure() {
    let t = tasks(&[("0", 0)], &[("1", 2)], &[]);
    let mut h = Harness::joined(Some("i"), &t);
    h.advance(Duration::from_secs(1));
    let (hb, b) = h.expect_hb();
    assert_eq!(b.member_epoch, 1);
    assert_eq!(
        b.instance_id.as_deref(),
        Some("i"),
        "the instance id always goes"
    );
    assert!(b.topology.is_none() && b.process_id.is_none() && b.user_endpoint.is_none());
    assert!(b.client_tags.is_none() && b.rack_id.is_none());
    assert_eq!(b.rebalance_timeout_ms, -1);
    assert_eq!(owned_of(&b), None, "unchanged tasks are left out");
    h.hb_answer(&hb, err(codes::COORDINATOR_LOAD_IN_PROGRESS));
    h.advance(Duration::from_secs(1));
    let (hb, b) = h.expect_hb();
    assert_eq!(
        owned_of(&b),
        Some(t.clone()),
        "after a failure the tasks go again"
    );
    assert!(b.task_offsets.is_some(), "and the offsets");
    h.hb_answer(&hb, ok(1, None));
    h.advance(Duration::from_secs(1));
    let (hb, b) = h.expect_hb();
    assert_eq!(owned_of(&b), None);
    h.hb_answer(&hb, ok(1, None));
    // A transport failure resets too (after the member read its record back).
    h.advance(Duration::from_secs(1));
    let (hb, _) = h.expect_hb();
    h.fail(&hb);
    h.find_coordinator();
    h.advance(Duration::from_secs(2));
    let rb = h.one();
    assert!(is_read_back(&rb), "{rb:?}");
    h.answer_body(&rb, described(1, &t));
    let (_, b) = h.expect_hb();
    assert_eq!(owned_of(&b), Some(t));
}

#[test]
fn task_offsets_go_once_the_interval_passed_and_only_when_changed() {
    let t = tasks(&[("0", 0)], &[], &[]);
    let mut h = Harness::joined(None, &t);
    h.m.set_task_offsets(BTreeMap::from([(task("0", 0), 10)]), BTreeMap::new());
    h.advance(Duration::from_secs(1));
    let (hb, b) = h.expect_hb();
    assert!(b.task_offsets.is_none(), "the 5 s interval has not passed");
    h.hb_answer(&hb, ok(1, None));
    h.advance(Duration::from_secs(4));
    let (hb, b) = h.expect_hb();
    assert_eq!(b.task_offsets.as_ref().map(|v| v[0].offset), Some(10));
    assert!(
        b.task_end_offsets.is_none(),
        "end offsets unchanged since the join"
    );
    h.hb_answer(&hb, ok(1, None));
    h.advance(Duration::from_secs(5));
    let (hb, b) = h.expect_hb();
    assert!(b.task_offsets.is_none(), "unchanged");
    h.hb_answer(&hb, ok(1, None));
    h.m.request_shutdown(h.now);
    let (_, b) = h.expect_hb();
    assert!(b.shutdown_application);
}

#[test]
fn task_offsets_a_join_carried_are_reported_again_when_next_due() {
    // A static member rejoining under its kept member id replaces its own -2 entry, and the
    // broker drops the join's task offsets with the old entry.
    let mut h = Harness::new(Some("i-1"));
    h.m.set_task_offsets(
        BTreeMap::from([(task("0", 0), 10)]),
        BTreeMap::from([(task("0", 0), 20)]),
    );
    h.m.join(h.now).unwrap();
    h.find_coordinator();
    let (join, b) = h.expect_hb();
    assert!(b.task_offsets.is_some() && b.task_end_offsets.is_some());
    h.hb_answer(&join, ok(1, Some(&StreamsTasks::default())));
    h.advance(Duration::from_secs(5));
    let (hb, b) = h.expect_hb();
    assert_eq!(b.task_offsets.as_ref().map(|v| v[0].offset), Some(10));
    assert_eq!(b.task_end_offsets.as_ref().map(|v| v[0].offset), Some(20));
    h.hb_answer(&hb, ok(1, None));
    h.advance(Duration::from_secs(5));
    let (_, b) = h.expect_hb();
    assert!(
        b.task_offsets.is_none() && b.task_end_offsets.is_none(),
        "unchanged"
    );
}

#[test]
fn a_caught_up_warmup_reports_offsets_before_the_interval() {
    let t = tasks(&[], &[], &[("0", 3)]);
    let mut h = Harness::joined(None, &t);
    h.m.set_task_offsets(
        BTreeMap::from([(task("0", 3), 950)]),
        BTreeMap::from([(task("0", 3), 1000)]),
    );
    h.advance(Duration::from_secs(1));
    let (hb, b) = h.expect_hb();
    assert!(
        b.task_offsets.is_some() && b.task_end_offsets.is_some(),
        "{b:?}"
    );
    // Unchanged, and repeated on every heartbeat until the warm-up is promoted.
    h.hb_answer(&hb, ok(1, None));
    h.advance(Duration::from_secs(1));
    let (hb, b) = h.expect_hb();
    assert!(
        b.task_offsets.is_some() && b.task_end_offsets.is_some(),
        "{b:?}"
    );
    let promoted = tasks(&[("0", 3)], &[], &[]);
    h.hb_answer(&hb, ok(2, Some(&promoted)));
    let (ack, b) = h.expect_hb();
    assert_eq!(
        owned_of(&b),
        Some(promoted),
        "the promotion is acknowledged"
    );
    h.hb_answer(&ack, ok(2, None));
    h.advance(Duration::from_secs(1));
    let (_, b) = h.expect_hb();
    assert!(
        b.task_offsets.is_none() && b.task_end_offsets.is_none(),
        "no warm-up left: unchanged offsets wait for the interval: {b:?}"
    );
}

// ----------------------------------------------------------------------------- reconciliation

#[test]
fn active_tasks_are_revoked_with_a_ticket_before_anything_is_assigned() {
    let t = tasks(&[("0", 0), ("0", 1)], &[], &[]);
    let mut h = Harness::joined(None, &t);
    h.advance(Duration::from_secs(1));
    let (hb, _) = h.expect_hb();
    let target = tasks(&[("0", 1), ("0", 2)], &[("1", 0)], &[]);
    h.hb_answer(&hb, ok(1, Some(&target)));
    let mut ev = h.take_events();
    let (revoked, ticket) = take_revoking(&mut ev);
    assert_eq!(revoked, vec![task("0", 0)]);
    assert!(
        assigned_of(&ev).is_empty(),
        "nothing assigned before the ticket: {ev:?}"
    );
    assert_eq!(h.m.state(), MemberState::AwaitRevoke);
    // Heartbeats meanwhile still report the revoked task as owned.
    h.advance(Duration::from_secs(1));
    let (hb, b) = h.expect_hb();
    assert_eq!(owned_of(&b), None, "unchanged since last sent");
    h.hb_answer(&hb, ok(1, None));
    assert!(h.m.tasks().active.contains(&task("0", 0)));
    h.m.complete_revocation(ticket, h.now).unwrap();
    let ev = h.take_events();
    let a = assigned_of(&ev);
    assert_eq!(a.len(), 1, "{ev:?}");
    assert_eq!(a[0].0, tasks(&[("0", 2)], &[("1", 0)], &[]));
    assert_eq!(a[0].1, target);
    let (ack, b) = h.expect_hb();
    assert_eq!(owned_of(&b), Some(target.clone()));
    h.hb_answer(&ack, ok(2, None));
    assert_eq!(h.m.state(), MemberState::Stable);
    assert_eq!(
        h.m.complete_revocation(RevokeTicket { id: 1 }, h.now),
        Err(ApiMisuse::UnknownTicket)
    );
}

#[test]
fn standby_and_warmup_tasks_are_released_without_a_ticket() {
    let t = tasks(&[("0", 0)], &[("1", 0)], &[("1", 1)]);
    let mut h = Harness::joined(None, &t);
    h.advance(Duration::from_secs(1));
    let (hb, _) = h.expect_hb();
    let target = tasks(&[("0", 0)], &[], &[]);
    h.hb_answer(&hb, ok(1, Some(&target)));
    let ev = h.take_events();
    assert!(
        !ev.iter()
            .any(|e| matches!(e, StreamsEvent::TasksRevoking { .. })),
        "{ev:?}"
    );
    assert_eq!(
        released_of(&ev),
        vec![(
            tasks(&[], &[("1", 0)], &[("1", 1)]),
            ReleaseReason::Unassigned
        )]
    );
    let (_, b) = h.expect_hb();
    assert_eq!(owned_of(&b), Some(target));
    assert!(h.m.process().holders(&task("1", 0)).is_empty());
}

#[test]
fn a_standby_promoted_to_active_changes_role_in_place() {
    let t = tasks(&[], &[("0", 2)], &[]);
    let mut h = Harness::joined(None, &t);
    h.advance(Duration::from_secs(1));
    let (hb, _) = h.expect_hb();
    let target = tasks(&[("0", 2)], &[], &[]);
    h.hb_answer(&hb, ok(2, Some(&target)));
    let ev = h.take_events();
    assert!(released_of(&ev).is_empty(), "{ev:?}");
    assert_eq!(assigned_of(&ev), vec![(target.clone(), target.clone())]);
    assert_eq!(
        h.m.process().holders(&task("0", 2)),
        vec![(ID.to_string(), TaskRole::Active)]
    );
}

#[test]
fn fencing_during_a_revocation_loses_the_ticket_tasks_too() {
    let t = tasks(&[("0", 0), ("0", 1)], &[("1", 3)], &[]);
    let mut h = Harness::joined(None, &t);
    h.advance(Duration::from_secs(1));
    let (hb, _) = h.expect_hb();
    h.hb_answer(&hb, ok(1, Some(&tasks(&[("0", 1)], &[("1", 3)], &[]))));
    let mut ev = h.take_events();
    let (_, ticket) = take_revoking(&mut ev);
    h.advance(Duration::from_secs(1));
    let (hb, _) = h.expect_hb();
    h.hb_answer(&hb, err(codes::FENCED_MEMBER_EPOCH));
    let ev = h.take_events();
    assert_eq!(lost_of(&ev), vec![(t, Reason::FencedMemberEpoch)]);
    assert_eq!(
        h.m.complete_revocation(ticket, h.now),
        Err(ApiMisuse::UnknownTicket)
    );
    let (_, b) = h.expect_hb();
    assert_eq!((b.member_id.as_str(), b.member_epoch), (ID, 0));
}

#[test]
fn tasks_are_not_taken_while_a_heartbeat_listing_owned_tasks_is_in_flight() {
    let t = tasks(&[("0", 0)], &[], &[]);
    let mut h = Harness::joined(None, &t);
    h.advance(Duration::from_secs(1));
    let (hb, _) = h.expect_hb();
    h.hb_answer(&hb, ok(1, Some(&tasks(&[("0", 5)], &[], &[]))));
    let mut ev = h.take_events();
    let (_, ticket) = take_revoking(&mut ev);
    // A failed heartbeat makes the next one list the owned tasks (0_0 still among them)...
    h.advance(Duration::from_secs(1));
    let (hb, _) = h.expect_hb();
    h.hb_answer(&hb, err(codes::COORDINATOR_LOAD_IN_PROGRESS));
    h.advance(Duration::from_secs(2));
    let (listing, b) = h.expect_hb();
    assert_eq!(owned_of(&b), Some(t));
    // ... and while it is in flight the ticket comes back: 0_0 goes, 0_5 waits, since the
    // broker would read that list as this member's current tasks.
    h.m.complete_revocation(ticket, h.now).unwrap();
    assert!(h.m.tasks().is_empty());
    assert_eq!(h.m.state(), MemberState::Reconciling);
    h.nothing("one heartbeat in flight at a time");
    h.hb_answer(&listing, ok(2, None));
    assert_eq!(h.m.tasks().active, set(&[("0", 5)]), "taken once answered");
    let (_, b) = h.expect_hb();
    assert_eq!(owned_of(&b), Some(tasks(&[("0", 5)], &[], &[])));
}

fn refused_of(events: &[StreamsEvent]) -> Vec<RefusedTasks> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamsEvent::TasksRefused { refused } => Some(refused.clone()),
            _ => None,
        })
        .collect()
}

/// Partitions by subtopology id, as [`RefusedTasks`] lists one role.
fn by_sub(ts: &[(&str, i32)]) -> BTreeMap<String, BTreeSet<i32>> {
    let mut m: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    for (sub, p) in ts {
        m.entry(sub.to_string()).or_default().insert(*p);
    }
    m
}

/// The group runs another topology (its first member declared subtopologies "8" and "9" with a
/// higher topology epoch; the coordinator answers STALE_TOPOLOGY): tasks of subtopologies this
/// member lacks are refused, the rest taken, and the member goes on.
#[test]
fn tasks_of_unknown_subtopologies_are_refused_and_the_rest_is_taken() {
    let mut h = Harness::new(None);
    h.m.join(h.now).unwrap();
    h.find_coordinator();
    let (join, _) = h.expect_hb();
    let stale = resp::Status::default()
        .with_status_code(0)
        .with_status_detail(s(
            "The member's topology epoch 7 is behind the group's topology epoch 8.",
        ));
    let target = tasks(
        &[("0", 0), ("9", 0), ("9", 3)],
        &[("1", 1), ("9", 1)],
        &[("8", 2)],
    );
    h.hb_answer(&join, ok(1, Some(&target)).with_status(Some(vec![stale])));
    let ev = h.take_events();
    assert!(fatal_of(&ev).is_empty(), "{ev:?}");
    let expected = RefusedTasks {
        active: by_sub(&[("9", 0), ("9", 3)]),
        standby: by_sub(&[("9", 1)]),
        warmup: by_sub(&[("8", 2)]),
    };
    assert_eq!(refused_of(&ev), vec![expected.clone()], "{ev:?}");
    assert_eq!(expected.subtopologies(), BTreeSet::from(["8", "9"]));
    assert_eq!(h.m.refused(), &expected);
    let runnable = tasks(&[("0", 0)], &[("1", 1)], &[]);
    assert_eq!(
        assigned_of(&ev),
        vec![(runnable.clone(), runnable.clone())],
        "only the tasks of known subtopologies reach the application"
    );
    assert_eq!(h.m.tasks(), &runnable);
    assert!(h.m.withheld().is_empty());
    assert!(h.m.process().holders(&task("9", 0)).is_empty());
    // The acknowledgement lists what the member runs, never a refused task; once it is
    // answered the member is Stable, not waiting for the refused tasks.
    let (ack, b) = h.expect_hb();
    assert_eq!(owned_of(&b), Some(runnable.clone()));
    h.hb_answer(&ack, ok(1, None).with_status(None));
    assert_eq!(h.m.state(), MemberState::Stable);
    h.nothing("nothing more once the known tasks are acknowledged");
    h.take_events();
    // The same assignment again: no new event, nothing to report.
    h.advance(Duration::from_secs(1));
    let (hb, b) = h.expect_hb();
    assert_eq!(owned_of(&b), None, "unchanged owned tasks are not listed");
    h.hb_answer(&hb, ok(1, Some(&target)).with_status(None));
    let ev = h.take_events();
    assert!(ev.is_empty(), "{ev:?}");
    assert_eq!(h.m.state(), MemberState::Stable);
    // After a failed heartbeat the full one lists the runnable tasks only.
    h.advance(Duration::from_secs(1));
    let (hb, _) = h.expect_hb();
    h.fail(&hb);
    h.find_coordinator();
    for _ in 0..20 {
        h.advance(Duration::from_millis(200));
        if let Some(out) = h.drain().pop() {
            if is_read_back(&out) {
                // The coordinator's record names the refused tasks too, as its answers do.
                h.answer_body(&out, described(1, &target));
                let ev = h.take_events();
                assert!(ev.is_empty(), "nothing changed: {ev:?}");
                continue;
            }
            assert_eq!(owned_of(&hb_body(&out)), Some(runnable.clone()));
            h.hb_answer(&out, ok(1, None));
            break;
        }
    }
    assert_eq!(h.m.state(), MemberState::Stable);
}

/// The coordinator takes a refused task away and moves a refused one to a known subtopology's
/// role: nothing is revoked (the member never held them), the event says what is refused now,
/// and the member reaches Stable at the new epoch.
#[test]
fn refused_tasks_taken_away_need_no_revocation_and_the_member_goes_on() {
    let t = tasks(&[("0", 0)], &[], &[]);
    let mut h = Harness::joined(None, &t);
    h.advance(Duration::from_secs(1));
    let (hb, _) = h.expect_hb();
    h.hb_answer(&hb, ok(2, Some(&tasks(&[("0", 0), ("9", 0)], &[], &[]))));
    let ev = h.take_events();
    assert_eq!(
        refused_of(&ev),
        vec![RefusedTasks {
            active: by_sub(&[("9", 0)]),
            ..RefusedTasks::default()
        }]
    );
    assert!(assigned_of(&ev).is_empty(), "nothing new to run: {ev:?}");
    assert_eq!(h.m.state(), MemberState::Stable, "{ev:?}");
    // The coordinator gives 9_0 to another member and this one 0_1.
    h.advance(Duration::from_secs(1));
    let (hb, _) = h.expect_hb();
    h.hb_answer(&hb, ok(3, Some(&tasks(&[("0", 0), ("0", 1)], &[], &[]))));
    let ev = h.take_events();
    assert!(
        !ev.iter()
            .any(|e| matches!(e, StreamsEvent::TasksRevoking { .. })),
        "{ev:?}"
    );
    assert_eq!(refused_of(&ev), vec![RefusedTasks::default()]);
    assert_eq!(h.m.refused(), &RefusedTasks::default());
    assert_eq!(
        assigned_of(&ev),
        vec![(
            tasks(&[("0", 1)], &[], &[]),
            tasks(&[("0", 0), ("0", 1)], &[], &[])
        )]
    );
    let (ack, b) = h.expect_hb();
    assert_eq!(owned_of(&b), Some(tasks(&[("0", 0), ("0", 1)], &[], &[])));
    h.hb_answer(&ack, ok(3, None));
    assert_eq!(h.m.state(), MemberState::Stable);
    assert_eq!(h.m.epoch(), 3);
}

#[test]
fn half_null_task_lists_are_fatal() {
    let mut h = Harness::new(None);
    h.m.join(h.now).unwrap();
    h.find_coordinator();
    let (join, _) = h.expect_hb();
    h.hb_answer(
        &join,
        ok(1, None).with_active_tasks(Some(task_ids(&[("0", 0)]))),
    );
    assert!(matches!(
        h.m.fatal_error(),
        Some(GroupError::InvalidResponse { .. })
    ));
}

// ------------------------------------------------------------------------------------- errors

#[test]
fn topology_authorization_and_fencing_errors_are_typed_and_fatal() {
    type Check = fn(&GroupError) -> bool;
    let rows: [(i16, Check); 7] = [
        (
            codes::INVALID_REQUEST,
            |e| matches!(e, GroupError::InvalidRequest { group, message: Some(m), .. } if group == "app" && m == "why"),
        ),
        (
            codes::STREAMS_INVALID_TOPOLOGY,
            |e| matches!(e, GroupError::StreamsInvalidTopology { message: Some(m), .. } if m == "why"),
        ),
        (codes::STREAMS_INVALID_TOPOLOGY_EPOCH, |e| {
            matches!(e, GroupError::StreamsInvalidTopologyEpoch { .. })
        }),
        (codes::STREAMS_TOPOLOGY_FENCED, |e| {
            matches!(e, GroupError::StreamsTopologyFenced { .. })
        }),
        (
            codes::FENCED_INSTANCE_ID,
            |e| matches!(e, GroupError::FencedInstanceId { instance_id, .. } if instance_id == "i"),
        ),
        (
            codes::GROUP_AUTHORIZATION_FAILED,
            |e| matches!(e, GroupError::GroupAuthorizationFailed { group } if group == "app"),
        ),
        (codes::UNSUPPORTED_VERSION, |e| {
            matches!(e, GroupError::StreamsProtocolUnsupported)
        }),
    ];
    for (code, check) in rows {
        let t = tasks(&[("0", 0)], &[], &[]);
        let mut h = Harness::joined(Some("i"), &t);
        h.advance(Duration::from_secs(1));
        let (hb, _) = h.expect_hb();
        h.hb_answer(&hb, err(code).with_error_message(Some(s("why"))));
        let ev = h.take_events();
        let fatal = fatal_of(&ev);
        assert_eq!(fatal.len(), 1, "code {code}: {ev:?}");
        assert!(check(fatal[0]), "code {code}: {:?}", fatal[0]);
        assert_eq!(lost_of(&ev).len(), 1, "code {code}");
        assert_eq!(h.m.state(), MemberState::Fatal);
        assert!(h.m.process().holders(&task("0", 0)).is_empty());
        h.nothing("a stopped member sends nothing");
    }
}

#[test]
fn a_broker_without_streams_groups_stops_the_member_typed() {
    let mut h = Harness::new(None);
    h.m.join(h.now).unwrap();
    h.find_coordinator();
    let (join, _) = h.expect_hb();
    h.m.handle_response(
        join.id,
        Err(TransportError::UnsupportedApi {
            api: Api::STREAMS_GROUP_HEARTBEAT,
            ours: 0..=1,
            broker: None,
        }),
        h.now,
    );
    assert_eq!(
        h.m.fatal_error(),
        Some(&GroupError::StreamsProtocolUnsupported)
    );
}

#[test]
fn the_poll_timeout_loses_the_tasks_leaves_and_a_poll_rejoins() {
    let t = tasks(&[("0", 0)], &[], &[]);
    let mut h = Harness::joined(None, &t);
    for _ in 0..40 {
        h.advance(Duration::from_secs(1));
        if let Some(o) = h.drain().into_iter().next() {
            let b = hb_body(&o);
            if b.member_epoch < 0 {
                assert_eq!(b.member_epoch, -1);
                h.hb_answer(&o, ok(-1, None));
                break;
            }
            h.hb_answer(&o, ok(1, None));
        }
    }
    let ev = h.take_events();
    assert_eq!(lost_of(&ev), vec![(t, Reason::PollTimeout)]);
    assert_eq!(h.m.state(), MemberState::Stale);
    h.m.poll(h.now);
    let (_, b) = h.expect_hb();
    assert_eq!((b.member_id.as_str(), b.member_epoch), (ID, 0));
}

// ----------------------------------------------------------------------- statuses, endpoints

#[test]
fn statuses_and_the_endpoint_map_are_events_when_they_change() {
    let t = tasks(&[("0", 0)], &[], &[]);
    let mut h = Harness::joined(None, &t);
    let status = |code: i8, d: &str| {
        resp::Status::default()
            .with_status_code(code)
            .with_status_detail(s(d))
    };
    let endpoints = vec![
        resp::EndpointToPartitions::default()
            .with_user_endpoint(
                resp::Endpoint::default()
                    .with_host(s("10.0.0.7"))
                    .with_port(8080),
            )
            .with_active_partitions(vec![
                resp::TopicPartition::default()
                    .with_topic(TopicName(s("in-a")))
                    .with_partitions(vec![0]),
            ]),
        resp::EndpointToPartitions::default()
            .with_user_endpoint(
                resp::Endpoint::default()
                    .with_host(s("10.0.0.7"))
                    .with_port(8080),
            )
            .with_standby_partitions(vec![
                resp::TopicPartition::default()
                    .with_topic(TopicName(s("in-a")))
                    .with_partitions(vec![1]),
            ]),
    ];
    h.advance(Duration::from_secs(1));
    let (hb, b) = h.expect_hb();
    assert_eq!(b.endpoint_information_epoch, 0, "the join's answer said 0");
    h.hb_answer(
        &hb,
        ok(1, None)
            .with_status(Some(vec![status(1, "in-a missing"), status(4, "stop")]))
            .with_endpoint_information_epoch(3)
            .with_partitions_by_user_endpoint(Some(endpoints)),
    );
    let ev = h.take_events();
    let statuses: Vec<&Vec<StreamsStatus>> = ev
        .iter()
        .filter_map(|e| match e {
            StreamsEvent::StatusChanged { statuses } => Some(statuses),
            _ => None,
        })
        .collect();
    assert_eq!(statuses.len(), 1, "{ev:?}");
    let codes: Vec<StatusCode> = statuses[0].iter().map(|s| s.code).collect();
    assert_eq!(
        codes,
        [
            StatusCode::MissingSourceTopics,
            StatusCode::ShutdownApplication
        ]
    );
    let maps: Vec<_> = ev
        .iter()
        .filter_map(|e| match e {
            StreamsEvent::EndpointsChanged { epoch, endpoints } => {
                Some((*epoch, endpoints.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(maps.len(), 1, "{ev:?}");
    assert_eq!(maps[0].0, 3);
    let e = &maps[0].1[&UserEndpoint::new("10.0.0.7", 8080)];
    assert_eq!(e.active.len(), 1, "entries of one endpoint are merged");
    assert_eq!(e.standby.len(), 1);
    // The same statuses again: no event; the next heartbeat sends the new endpoint epoch.
    h.advance(Duration::from_secs(1));
    let (hb, b) = h.expect_hb();
    assert_eq!(b.endpoint_information_epoch, 3);
    h.hb_answer(
        &hb,
        ok(1, None)
            .with_status(Some(vec![status(4, "stop"), status(1, "in-a missing")]))
            .with_endpoint_information_epoch(3),
    );
    let ev = h.take_events();
    assert!(ev.is_empty(), "{ev:?}");
    h.advance(Duration::from_secs(1));
    let (hb, _) = h.expect_hb();
    h.hb_answer(
        &hb,
        ok(1, None)
            .with_status(Some(vec![]))
            .with_endpoint_information_epoch(3),
    );
    let ev = h.take_events();
    assert_eq!(ev, vec![StreamsEvent::StatusChanged { statuses: vec![] }]);
}

// ------------------------------------------------------------------------------------- guard

#[test]
fn the_guard_never_grants_one_task_to_two_members_in_any_roles() {
    let roles = [TaskRole::Active, TaskRole::Standby, TaskRole::Warmup];
    for first in roles {
        for second in roles {
            let p = process();
            let t = task("0", 2);
            assert_eq!(p.acquire("a", &t, first), guard::Acquire::Granted);
            let w = p.acquire("b", &t, second);
            assert!(
                matches!(&w, guard::Acquire::Withheld { holder, holder_role, new: true } if holder == "a" && *holder_role == first),
                "{first:?} then {second:?}: {w:?}"
            );
            assert_eq!(p.holders(&t), vec![("a".to_string(), first)]);
            assert_eq!(p.interventions().withheld, 1);
            // Asking again is no new intervention.
            assert!(matches!(
                p.acquire("b", &t, second),
                guard::Acquire::Withheld { new: false, .. }
            ));
            assert_eq!(p.interventions().withheld, 1);
            // The holder's own role change is granted.
            assert_eq!(p.acquire("a", &t, second), guard::Acquire::Granted);
            p.release("a", &t);
            assert_eq!(p.acquire("b", &t, second), guard::Acquire::Granted);
            assert_eq!(p.holders(&t), vec![("b".to_string(), second)]);
        }
    }
    let p = StreamsProcess::unguarded(PID, None);
    let t = task("0", 2);
    assert_eq!(
        p.acquire("a", &t, TaskRole::Standby),
        guard::Acquire::Granted
    );
    assert_eq!(
        p.acquire("b", &t, TaskRole::Active),
        guard::Acquire::Granted
    );
    assert_eq!(p.doubly_held().len(), 1);
    assert_eq!(p.interventions(), Interventions::default());
}

#[test]
fn an_active_claim_makes_a_standby_holder_yield_and_reserves_the_task() {
    let p = process();
    let t = task("0", 2);
    assert_eq!(
        p.acquire("a2", &t, TaskRole::Standby),
        guard::Acquire::Granted
    );
    assert!(matches!(
        p.acquire("a3", &t, TaskRole::Active),
        guard::Acquire::Withheld { .. }
    ));
    assert!(p.must_yield("a2"));
    assert!(!p.must_yield("a3"));
    let gave = p.yield_to_active("a2");
    assert_eq!(gave.len(), 1);
    assert_eq!(
        (
            gave[0].kind,
            gave[0].role,
            gave[0].other_member.as_str(),
            gave[0].other_role
        ),
        (
            InterventionKind::GaveUp,
            TaskRole::Standby,
            "a3",
            TaskRole::Active
        )
    );
    assert_eq!(
        p.interventions(),
        Interventions {
            withheld: 1,
            given_up: 1
        }
    );
    // Reserved for the active claimant: a standby claim (even the old holder's) waits.
    assert!(matches!(
        p.acquire("a2", &t, TaskRole::Standby),
        guard::Acquire::Withheld { .. }
    ));
    assert!(matches!(
        p.acquire("a4", &t, TaskRole::Warmup),
        guard::Acquire::Withheld { .. }
    ));
    assert_eq!(
        p.acquire("a3", &t, TaskRole::Active),
        guard::Acquire::Granted
    );
    // An active holder is never forced out.
    assert!(matches!(
        p.acquire("a5", &t, TaskRole::Active),
        guard::Acquire::Withheld { .. }
    ));
    assert!(!p.must_yield("a3"));
    assert!(p.yield_to_active("a3").is_empty());
}

/// A member of process `p` with id from seed `n`, joined and stable at epoch 1 holding `t`.
fn local_member(p: &StreamsProcess, n: u64, t: &StreamsTasks) -> Harness {
    let id = MemberId::from_seed(n);
    let mut h = Harness::build(Some(&format!("i-{n}")), p.clone(), id);
    h.m.join(h.now).unwrap();
    h.find_coordinator();
    let (join, _) = h.expect_hb();
    h.hb_answer(&join, ok(1, Some(t)).with_member_id(s(id.as_str())));
    if !t.is_empty() {
        let (ack, _) = h.expect_hb();
        h.hb_answer(&ack, ok(1, None).with_member_id(s(id.as_str())));
    }
    h.drain();
    h.events.clear();
    h
}

/// Answers `h`'s next regular heartbeat with `target` (or unchanged), returning what it listed.
fn round(h: &mut Harness, epoch: i32, target: Option<&StreamsTasks>) -> Option<StreamsTasks> {
    let id = h.m.member_id().to_string();
    let mut out = h.drain();
    if out.is_empty() {
        h.advance(Duration::from_secs(1));
        out = h.drain();
    }
    assert_eq!(out.len(), 1, "{out:?}");
    let b = hb_body(&out[0]);
    h.hb_answer(&out[0], ok(epoch, target).with_member_id(s(&id)));
    owned_of(&b)
}

/// KAFKA-21401 step 8: A2 holds standby 0_2; the coordinator assigns active 0_2 to A3 of the
/// same process. Guarded: A3 withholds it, A2 gives the standby up at its next input, A3 takes
/// it within the heartbeat round; no instant with both. Unguarded: both hold it.
#[test]
fn seed_step_8_active_wins_within_one_round_and_never_double_held() {
    let p = process();
    let a1 = local_member(&p, 1, &tasks(&[("0", 0)], &[], &[]));
    let mut a2 = local_member(&p, 2, &tasks(&[("0", 1)], &[("0", 2)], &[]));
    let mut a3 = local_member(&p, 3, &StreamsTasks::default());
    let (a2_id, a3_id) = (a2.m.member_id().to_string(), a3.m.member_id().to_string());
    // A3's next heartbeat brings active 0_2.
    round(&mut a3, 2, Some(&tasks(&[("0", 2)], &[], &[])));
    assert_eq!(
        a3.m.withheld(),
        &BTreeMap::from([(task("0", 2), TaskRole::Active)])
    );
    assert!(a3.m.tasks().is_empty(), "not handed to the application");
    let ev = a3.take_events();
    assert!(ev.iter().any(|e| matches!(e, StreamsEvent::GuardIntervened(i) if i.kind == InterventionKind::Withheld && i.other_member == a2_id && i.other_role == TaskRole::Standby)), "{ev:?}");
    assert!(
        assigned_of(&ev).iter().all(|(added, _)| added.is_empty()),
        "{ev:?}"
    );
    assert_eq!(
        p.holders(&task("0", 2)),
        vec![(a2_id.clone(), TaskRole::Standby)]
    );
    // A3's next heartbeat does not list 0_2.
    let listed = round(&mut a3, 2, None);
    assert!(listed.as_ref().is_none_or(|l| l.is_empty()), "{listed:?}");
    // A2: due at once, gives the standby up and reports it.
    assert_eq!(a2.m.poll_timeout(), Some((a2.now, Timer::TaskGuard)));
    a2.m.handle_timeout(a2.now);
    let ev = a2.take_events();
    assert!(
        released_of(&ev).contains(&(tasks(&[], &[("0", 2)], &[]), ReleaseReason::GivenUpToActive)),
        "{ev:?}"
    );
    assert!(ev.iter().any(|e| matches!(e, StreamsEvent::GuardIntervened(i) if i.kind == InterventionKind::GaveUp && i.other_member == a3_id)), "{ev:?}");
    let listed = round(&mut a2, 1, None);
    assert_eq!(
        listed,
        Some(tasks(&[("0", 1)], &[], &[])),
        "reported no longer held"
    );
    assert!(
        a2.m.withheld().contains_key(&task("0", 2)),
        "its target still names it: withheld"
    );
    assert!(p.holders(&task("0", 2)).is_empty());
    // A3 takes it at its next guard check, within 250 ms.
    let (at, timer) = a3.m.poll_timeout().unwrap();
    assert_eq!(timer, Timer::TaskGuard);
    assert!(at <= a3.now + GUARD_RECHECK);
    a3.now = at;
    a3.m.handle_timeout(at);
    let ev = a3.take_events();
    assert_eq!(
        assigned_of(&ev),
        vec![(tasks(&[("0", 2)], &[], &[]), tasks(&[("0", 2)], &[], &[]))]
    );
    assert_eq!(
        p.holders(&task("0", 2)),
        vec![(a3_id.clone(), TaskRole::Active)]
    );
    let listed = round(&mut a3, 2, None);
    assert_eq!(listed, Some(tasks(&[("0", 2)], &[], &[])));
    assert!(p.doubly_held().is_empty());
    assert_eq!(
        p.interventions(),
        Interventions {
            withheld: 2,
            given_up: 1
        }
    );
    // A2's standby claim goes once its target drops 0_2; then nothing is withheld.
    round(&mut a2, 2, Some(&tasks(&[("0", 1)], &[], &[])));
    assert!(a2.m.withheld().is_empty());
    assert!(!p.must_yield(&a2_id));
    drop(a1);
}

#[test]
fn seed_step_8_without_the_guard_both_members_hold_the_task() {
    let p = StreamsProcess::unguarded(PID, None);
    let mut a2 = local_member(&p, 2, &tasks(&[("0", 1)], &[("0", 2)], &[]));
    let mut a3 = local_member(&p, 3, &StreamsTasks::default());
    round(&mut a3, 2, Some(&tasks(&[("0", 2)], &[], &[])));
    assert_eq!(a3.m.tasks().active, set(&[("0", 2)]));
    assert_eq!(a2.m.tasks().standby, set(&[("0", 2)]));
    let double = p.doubly_held();
    assert_eq!(double.len(), 1);
    assert_eq!(double[0].0, task("0", 2));
    let roles: BTreeSet<TaskRole> = double[0].1.iter().map(|(_, r)| *r).collect();
    assert_eq!(roles, BTreeSet::from([TaskRole::Active, TaskRole::Standby]));
    a2.m.handle_timeout(a2.now);
    assert!(a2.take_events().is_empty(), "nothing is given up unguarded");
    assert_eq!(p.interventions(), Interventions::default());
}

#[test]
fn a_withheld_standby_is_taken_once_the_holder_releases_it() {
    let p = process();
    let mut a1 = local_member(&p, 1, &tasks(&[], &[("1", 0)], &[]));
    let mut a2 = local_member(&p, 2, &StreamsTasks::default());
    round(&mut a2, 2, Some(&tasks(&[], &[("1", 0)], &[])));
    assert_eq!(a2.m.withheld().len(), 1);
    assert_eq!(a2.m.state(), MemberState::Reconciling);
    // A standby holder is not forced out by a standby claim.
    a1.m.handle_timeout(a1.now);
    assert!(a1.take_events().is_empty());
    a2.advance(GUARD_RECHECK);
    assert!(a2.m.withheld().len() == 1 && a2.m.tasks().is_empty());
    // The coordinator revokes it from A1 (no ticket): A2 takes it at its next check.
    round(&mut a1, 2, Some(&StreamsTasks::default()));
    assert!(a1.m.tasks().is_empty());
    a2.advance(GUARD_RECHECK);
    assert_eq!(a2.m.tasks().standby, set(&[("1", 0)]));
    assert!(a2.m.withheld().is_empty());
    assert!(p.doubly_held().is_empty());
}

#[test]
fn a_member_that_goes_away_releases_what_it_held_in_the_guard() {
    let p = process();
    let a1 = local_member(&p, 1, &tasks(&[("0", 0)], &[], &[]));
    assert_eq!(p.holders(&task("0", 0)).len(), 1);
    drop(a1);
    assert!(p.holders(&task("0", 0)).is_empty());
}

#[test]
fn fenced_instance_id_on_the_recovery_leave_stops_at_once_without_a_wait() {
    let mut h = Harness::with_group(config(Some("i")).with_unreleased_instance_margin(None));
    h.m.join(h.now).unwrap();
    h.find_coordinator();
    let (join, _) = h.expect_hb();
    h.fail(&join);
    h.find_coordinator();
    h.advance(Duration::from_secs(2));
    let (join, _) = h.expect_hb();
    h.hb_answer(&join, err(codes::UNRELEASED_INSTANCE_ID));
    let (leave, b) = h.expect_hb();
    assert_eq!(b.member_epoch, -2);
    h.hb_answer(&leave, err(codes::FENCED_INSTANCE_ID));
    assert!(matches!(
        h.m.fatal_error(),
        Some(GroupError::UnreleasedInstanceId { instance_id, .. }) if instance_id == "i"
    ));
}

#[test]
fn a_close_during_a_revocation_takes_the_ticket_back_and_leaves_at_once() {
    let t = tasks(&[("0", 0), ("0", 1)], &[("1", 1)], &[]);
    let mut h = Harness::joined(None, &t);
    h.advance(Duration::from_secs(1));
    let (hb, _) = h.expect_hb();
    h.hb_answer(&hb, ok(1, Some(&tasks(&[("0", 1)], &[("1", 1)], &[]))));
    let mut ev = h.take_events();
    let (revoked, ticket) = take_revoking(&mut ev);
    assert_eq!(revoked, vec![task("0", 0)]);
    h.m.close(CloseOptions::Default, h.now);
    let ev = h.take_events();
    assert_eq!(
        released_of(&ev),
        vec![(
            tasks(&[("0", 0), ("0", 1)], &[("1", 1)], &[]),
            ReleaseReason::Leaving
        )],
        "the ticket's task is released with the rest"
    );
    assert!(
        h.m.process().holders(&task("0", 0)).is_empty(),
        "the ticket's task is given back with it"
    );
    let (leave, b) = h.expect_hb();
    assert_eq!(b.member_epoch, -1, "the leave goes out at once");
    assert_eq!(
        h.m.complete_revocation(ticket, h.now),
        Err(ApiMisuse::UnknownTicket)
    );
    h.hb_answer(&leave, ok(-1, None));
    assert_eq!(h.m.state(), MemberState::Closed);
}

#[test]
fn a_new_target_ends_waits_for_tasks_it_no_longer_names() {
    let p = process();
    let mut a2 = local_member(&p, 2, &tasks(&[], &[("0", 2)], &[]));
    let mut a3 = local_member(&p, 3, &tasks(&[("1", 0)], &[], &[]));
    round(&mut a3, 2, Some(&tasks(&[("1", 0), ("0", 2)], &[], &[])));
    assert_eq!(a3.m.withheld().len(), 1);
    // The coordinator changes its mind (and revokes 1_0 too): A3 no longer waits for 0_2,
    // even before its ticket comes back, so A2 keeps its standby.
    round(&mut a3, 3, Some(&tasks(&[], &[], &[])));
    assert_eq!(a3.m.state(), MemberState::AwaitRevoke);
    assert!(a3.m.withheld().is_empty());
    assert!(!p.must_yield(a2.m.member_id()));
    a2.m.handle_timeout(a2.now);
    assert_eq!(a2.m.tasks().standby, set(&[("0", 2)]));
}

/// Two members of one process, one task, every pair of roles: the second never gets the task
/// while the first holds it; an active assignment makes a standby or warm-up holder give it up
/// at its next input, and then the active member takes it.
#[test]
fn two_local_members_never_hold_one_task_at_once_in_any_roles() {
    let roles = [TaskRole::Active, TaskRole::Standby, TaskRole::Warmup];
    let x = task("0", 2);
    let of = |role: TaskRole| {
        let mut t = StreamsTasks::default();
        t.of_mut(role).insert(task("0", 2));
        t
    };
    for held in roles {
        for assigned in roles {
            let p = process();
            let mut a1 = local_member(&p, 1, &of(held));
            let mut a2 = local_member(&p, 2, &StreamsTasks::default());
            let a1_id = a1.m.member_id().to_string();
            round(&mut a2, 2, Some(&of(assigned)));
            let case = format!("{held:?} held, {assigned:?} assigned");
            assert!(a2.m.tasks().is_empty(), "{case}");
            assert_eq!(a2.m.withheld().get(&x), Some(&assigned), "{case}");
            assert_eq!(p.holders(&x), vec![(a1_id.clone(), held)], "{case}");
            // A1's next input.
            a1.m.handle_timeout(a1.now);
            let gives_up = assigned == TaskRole::Active && held != TaskRole::Active;
            assert_eq!(a1.m.tasks().is_empty(), gives_up, "{case}");
            assert!(p.doubly_held().is_empty(), "{case}");
            // A2's next check.
            a2.advance(GUARD_RECHECK);
            assert_eq!(a2.m.tasks().of(assigned).contains(&x), gives_up, "{case}");
            assert!(p.doubly_held().is_empty(), "{case}");
            let interventions = p.interventions();
            assert_eq!(
                interventions.withheld,
                1 + u64::from(gives_up),
                "{case}: {interventions:?}"
            );
            assert_eq!(interventions.given_up, u64::from(gives_up), "{case}");
        }
    }
}

// ---------------------------------------------------------------- the membership lease

#[test]
fn the_lease_expires_at_the_bound_from_the_last_answered_send_not_before() {
    // The default group session timeout, 45 s, less the broker's 1 s interval: 44 s.
    let held = tasks(&[("0", 0), ("0", 1)], &[("1", 0)], &[]);
    let mut h = Harness::joined(Some("i1"), &held);
    h.advance(Duration::from_secs(1));
    let (hb, _) = h.expect_hb();
    let confirmed = h.now;
    h.now += Duration::from_secs(3);
    h.hb_answer(&hb, ok(1, None));
    // From now on nothing is answered.
    h.advance(Duration::from_secs(1));
    let (unanswered, _) = h.expect_hb();
    let bound = confirmed + Duration::from_secs(44);
    // The application keeps polling (max.poll.interval.ms is 30 s here).
    while h.now + Duration::from_secs(10) < bound {
        h.now += Duration::from_secs(10);
        h.m.poll(h.now);
        h.m.handle_timeout(h.now);
    }
    h.now = bound - Duration::from_millis(1);
    h.m.poll(h.now);
    h.m.handle_timeout(h.now);
    let before = h.take_events();
    assert!(
        lost_of(&before).is_empty(),
        "not before the bound: {before:?}"
    );
    assert_eq!(h.m.state(), MemberState::Stable);
    h.advance(bound - h.now);
    let out = h.drain();
    let events = h.take_events();
    assert_eq!(
        lost_of(&events),
        vec![(held.clone(), Reason::LeaseExpired)],
        "{events:?}"
    );
    assert_eq!(h.m.member_id(), ID, "the member id is kept");
    assert_eq!((h.m.epoch(), h.m.state()), (0, MemberState::Joining));
    assert!(h.m.tasks().is_empty());
    // The coordinator answers again: the epoch-0 join carries the same member id.
    let fc = out
        .iter()
        .find(|o| matches!(o.request, Request::FindCoordinator { .. }))
        .expect("the coordinator is looked up again");
    h.answer(fc, find_coordinator_answer());
    h.fail(&unanswered);
    let (join, b) = h.expect_hb();
    assert_eq!((b.member_epoch, b.member_id.as_str()), (0, ID));
    assert_eq!(b.instance_id.as_deref(), Some("i1"));
    h.hb_answer(&join, ok(2, Some(&held)));
    h.drain();
    assert_eq!(h.m.tasks(), &held);
}

#[test]
fn a_starved_member_loses_its_tasks_before_acting_on_a_late_answer() {
    let held = tasks(&[("0", 0)], &[], &[]);
    let mut h = Harness::joined(None, &held);
    h.advance(Duration::from_secs(1));
    let (hb, _) = h.expect_hb();
    h.now += Duration::from_secs(60);
    h.hb_answer(&hb, ok(1, Some(&held)));
    let events = h.take_events();
    assert!(
        matches!(
            events.first(),
            Some(StreamsEvent::TasksLost {
                reason: Reason::LeaseExpired,
                ..
            })
        ),
        "{events:?}"
    );
    assert!(assigned_of(&events).is_empty(), "{events:?}");
    assert!(h.m.tasks().is_empty());
}

#[test]
fn a_healthy_member_never_loses_its_lease() {
    let held = tasks(&[("0", 0)], &[("1", 1)], &[]);
    let mut h = Harness::joined(None, &held);
    for _ in 0..300 {
        h.m.poll(h.now);
        h.advance(Duration::from_secs(1));
        let out = h.drain();
        h.now += Duration::from_millis(300);
        for o in &out {
            h.hb_answer(o, ok(1, None));
        }
    }
    assert!(lost_of(&h.take_events()).is_empty());
    assert_eq!(h.m.tasks(), &held);
}

/// Issue 29: the coordinator assigns A2 active 0_0, which A1 of the same process holds, so the
/// guard withholds it and A2 acknowledges without it; the next target drops 0_0. The coordinator
/// keeps A2 at its epoch with 0_0 pending revocation until a heartbeat lists A2's owned tasks
/// without it (CurrentAssignmentBuilder.build, UNREVOKED_TASKS; a null list is "unchanged" and
/// never moves it): A2 must list them at once although they did not change, then reach the new
/// epoch.
#[test]
fn a_withheld_task_taken_away_is_reported_as_not_owned_and_the_member_advances() {
    let p = process();
    let _a1 = local_member(&p, 1, &tasks(&[("0", 0)], &[], &[]));
    let mut a2 = local_member(&p, 2, &tasks(&[("0", 1)], &[], &[]));
    let id = a2.m.member_id().to_string();
    let kept = tasks(&[("0", 1)], &[], &[]);
    // Epoch 2 adds active 0_0: withheld, A2 keeps running 0_1 only.
    round(&mut a2, 2, Some(&tasks(&[("0", 0), ("0", 1)], &[], &[])));
    assert_eq!(
        a2.m.withheld(),
        &BTreeMap::from([(task("0", 0), TaskRole::Active)])
    );
    assert_eq!(a2.m.tasks(), &kept);
    // The coordinator's target (epoch 3) drops 0_0: the answer carries the assignment without
    // it at the unchanged member epoch 2 (0_0 pending revocation).
    round(&mut a2, 2, Some(&kept));
    assert!(a2.m.withheld().is_empty());
    assert_eq!(a2.m.tasks(), &kept);
    let (hb, b) = a2.expect_hb();
    assert_eq!(b.member_epoch, 2);
    assert_eq!(
        owned_of(&b),
        Some(kept.clone()),
        "the owned tasks go at once, without 0_0"
    );
    // The coordinator moves A2 to epoch 3 (same tasks: no assignment in the answer).
    a2.hb_answer(&hb, ok(3, None).with_member_id(s(&id)));
    a2.nothing("reconciled at the new epoch");
    assert_eq!((a2.m.epoch(), a2.m.state()), (3, MemberState::Stable));
    assert_eq!(a2.m.tasks(), &kept);
    // Later heartbeats go back to leaving unchanged owned tasks out.
    assert_eq!(round(&mut a2, 3, None), None);
}

// ------------------------------------------------------------------------------------ commits

fn commit_of(tp: TopicPartition, offset: i64) -> CommitOffset {
    CommitOffset {
        partition: tp,
        offset,
        metadata: None,
    }
}

fn commit_body(out: &Outbound) -> OffsetCommitRequest {
    match test_support::body(out) {
        RequestKind::OffsetCommit(c) => c,
        other => panic!("not an OffsetCommit: {other:?}"),
    }
}

fn committed_of(events: &[StreamsEvent]) -> Vec<(CommitId, Result<(), CommitError>)> {
    picked!(events, StreamsEvent::Committed { id, result } => (*id, result.clone()))
}

#[test]
fn a_task_input_is_its_partition_of_every_source_and_repartition_source_topic() {
    let t = topology();
    assert_eq!(
        t.input_partitions(&task("0", 2)),
        vec![
            TopicPartition::new("in-a", 2),
            TopicPartition::new("in-b", 2)
        ]
    );
    assert_eq!(
        t.input_partitions(&task("1", 3)),
        vec![TopicPartition::new("app-rep", 3)]
    );
    assert!(t.input_partitions(&task("9", 0)).is_empty());
}

/// The owner of an active task commits its input offsets with the member id and epoch (the
/// coordinator's streams-group commit check: StreamsGroup.validateOffsetCommit); a standby's
/// partitions, a revoked task's, and anything outside the group are refused locally, typed.
#[test]
fn the_active_owner_commits_its_inputs_and_nobody_else_does() {
    let t = tasks(&[("0", 1)], &[("0", 2)], &[]);
    let mut h = Harness::joined(Some("i1"), &t);
    let id = h.m.commit(
        vec![
            commit_of(TopicPartition::new("in-a", 1), 10),
            commit_of(TopicPartition::new("in-b", 1), 11),
        ],
        h.now,
    );
    let out = h.one();
    let c = commit_body(&out);
    assert_eq!(c.group_id.as_str(), "app");
    assert_eq!(c.member_id.as_str(), ID);
    assert_eq!(c.generation_id_or_member_epoch, 1);
    assert_eq!(c.group_instance_id.as_deref(), Some("i1"));
    let sent: Vec<(String, i32, i64)> = (c.topics.iter())
        .flat_map(|t| {
            (t.partitions.iter())
                .map(|p| (t.name.to_string(), p.partition_index, p.committed_offset))
        })
        .collect();
    assert_eq!(sent, vec![("in-a".into(), 1, 10), ("in-b".into(), 1, 11)]);

    // A standby's partition is not the member's to commit.
    let standby =
        h.m.commit(vec![commit_of(TopicPartition::new("in-a", 2), 5)], h.now);
    h.collect_events();
    let refused = committed_of(&h.events);
    assert_eq!(
        refused,
        vec![(
            standby,
            Err(CommitError::NotOwned {
                partitions: vec![TopicPartition::new("in-a", 2)]
            })
        )]
    );
    assert!(refused.iter().all(|(i, _)| *i != id));

    // Task 0_1 revoked: committable until the ticket is back, refused after.
    h.events.clear();
    h.advance(Duration::from_secs(1));
    let (hb, _) = h.expect_hb();
    h.hb_answer(&hb, ok(2, Some(&tasks(&[], &[("0", 2)], &[]))));
    let mut ev = h.take_events();
    let (_, ticket) = take_revoking(&mut ev);
    h.m.commit(vec![commit_of(TopicPartition::new("in-a", 1), 12)], h.now);
    h.collect_events();
    assert!(
        committed_of(&h.events).is_empty(),
        "a task being revoked still commits: {:?}",
        h.events
    );
    h.m.complete_revocation(ticket, h.now).unwrap();
    h.events.clear();
    let late =
        h.m.commit(vec![commit_of(TopicPartition::new("in-a", 1), 13)], h.now);
    h.collect_events();
    assert_eq!(
        committed_of(&h.events),
        vec![(
            late,
            Err(CommitError::NotOwned {
                partitions: vec![TopicPartition::new("in-a", 1)]
            })
        )]
    );
}

#[test]
fn a_member_outside_the_group_commits_nothing() {
    let mut h = Harness::new(None);
    let id =
        h.m.commit(vec![commit_of(TopicPartition::new("in-a", 1), 1)], h.now);
    h.collect_events();
    assert!(matches!(
        committed_of(&h.events).as_slice(),
        [(i, Err(CommitError::NotMember { .. }))] if *i == id
    ));
    h.nothing("a refused commit sends nothing");
}

/// Fetching a task's committed offsets goes to the coordinator with the member id and epoch and
/// answers as [`StreamsEvent::OffsetsFetched`].
#[test]
fn a_new_owner_fetches_its_task_inputs_with_the_member_epoch() {
    let t = tasks(&[("1", 3)], &[], &[]);
    let mut h = Harness::joined(None, &t);
    let inputs = h.m.input_partitions(&task("1", 3));
    let id = h.m.fetch_offsets(inputs.clone(), h.now);
    let out = h.one();
    let RequestKind::OffsetFetch(f) = test_support::body(&out) else {
        panic!("not an OffsetFetch: {out:?}")
    };
    assert_eq!(f.groups.len(), 1);
    assert_eq!(f.groups[0].member_id.as_deref(), Some(ID));
    assert_eq!(f.groups[0].member_epoch, 1);
    let answer = OffsetFetchResponse::default().with_groups(vec![
        OffsetFetchResponseGroup::default()
            .with_group_id(GroupId(s("app")))
            .with_topics(vec![
                OffsetFetchResponseTopics::default()
                    .with_name(TopicName(s("app-rep")))
                    .with_partitions(vec![
                        OffsetFetchResponsePartitions::default()
                            .with_partition_index(3)
                            .with_committed_offset(77),
                    ]),
            ]),
    ]);
    h.answer(&out, ResponseKind::OffsetFetch(answer));
    let ev = h.take_events();
    let fetched: Vec<(FetchId, Result<_, CommitError>)> =
        picked!(ev, StreamsEvent::OffsetsFetched { id: i, result } => (*i, result.clone()));
    assert_eq!(fetched.len(), 1, "{ev:?}");
    assert_eq!(fetched[0].0, id);
    let offsets = fetched[0].1.as_ref().expect("fetched");
    assert_eq!(offsets.get(&inputs[0]).and_then(|o| o.offset), Some(77));
}

/// A heartbeat answer lost in the transport may have carried an assignment the coordinator
/// will not send again (it sends one only on a join or a change): before its next heartbeat
/// the member reads its record back (StreamsGroupDescribe) and takes the tasks and epoch it
/// names, as if the answer had arrived; the full heartbeat that follows at once lists them.
#[test]
fn a_lost_answer_is_read_back_before_the_next_heartbeat() {
    for instance in [None, Some("i")] {
        let t = tasks(&[("0", 0)], &[], &[]);
        let mut h = Harness::joined(instance, &t);
        h.advance(Duration::from_secs(1));
        let (hb, _) = h.expect_hb();
        h.fail(&hb);
        h.find_coordinator();
        let mut rb = None;
        for _ in 0..20 {
            h.advance(Duration::from_millis(100));
            if let Some(out) = h.drain().pop() {
                rb = Some(out);
                break;
            }
        }
        let rb = rb.expect("something goes after the backoff");
        assert!(
            is_read_back(&rb),
            "the read comes first, not a heartbeat: {rb:?}"
        );
        h.nothing("one at a time: no heartbeat beside the read");
        // The lost answer moved the member to epoch 2 with one more active task.
        let grown = tasks(&[("0", 0), ("0", 1)], &[("1", 2)], &[]);
        h.answer_body(&rb, described(2, &grown));
        let ev = h.take_events();
        assert_eq!(
            assigned_of(&ev),
            vec![(tasks(&[("0", 1)], &[("1", 2)], &[]), grown.clone())],
            "{ev:?}"
        );
        assert_eq!(h.m.tasks(), &grown);
        let (hb, b) = h.expect_hb();
        assert_eq!(b.member_epoch, 2, "at the epoch read back");
        assert_eq!(
            owned_of(&b),
            Some(grown.clone()),
            "full, listing what it runs"
        );
        assert_eq!(b.instance_id.as_deref(), instance);
        h.hb_answer(&hb, ok(2, None));
        assert_eq!(h.m.state(), MemberState::Stable);
        // A lost answer that took a task away: the task is revoked with a ticket.
        h.advance(Duration::from_secs(1));
        let (hb, _) = h.expect_hb();
        h.fail(&hb);
        h.find_coordinator();
        let rb = loop {
            h.advance(Duration::from_millis(100));
            if let Some(out) = h.drain().pop() {
                break out;
            }
        };
        assert!(is_read_back(&rb), "{rb:?}");
        let shrunk = tasks(&[("0", 1)], &[("1", 2)], &[]);
        h.answer_body(&rb, described(2, &shrunk));
        let mut ev = h.take_events();
        let (revoking, ticket) = take_revoking(&mut ev);
        assert_eq!(revoking, vec![task("0", 0)]);
        h.m.complete_revocation(ticket, h.now).unwrap();
        let (_, b) = h.expect_hb();
        assert_eq!(b.member_epoch, 2);
        assert_eq!(owned_of(&b), Some(shrunk));
    }
}

/// The read's own errors: a coordinator that moved is read again (after finding it again); a
/// refusal, a group or member the record lacks, or a record older than the member's epoch
/// change nothing and the heartbeat goes at once. A heartbeat answered with an error a
/// processed write can get (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR) is read back too; one
/// that was not processed (COORDINATOR_LOAD_IN_PROGRESS) is not.
#[test]
fn the_read_back_retries_a_moved_coordinator_and_gives_way_to_refusals() {
    let t = tasks(&[("0", 0)], &[], &[]);
    let mut h = Harness::joined(None, &t);
    let next = |h: &mut Harness| loop {
        h.advance(Duration::from_millis(100));
        let mut out = h.drain();
        if let Some(fc) = out.iter().position(is_find_coordinator) {
            let fc = out.remove(fc);
            h.answer_lookup(&fc, "app");
            out.extend(h.drain());
        }
        if let Some(o) = out.pop() {
            break o;
        }
    };
    h.advance(Duration::from_secs(1));
    let (hb, _) = h.expect_hb();
    h.hb_answer(&hb, err(codes::COORDINATOR_NOT_AVAILABLE));
    let rb = next(&mut h);
    assert!(is_read_back(&rb), "{rb:?}");
    let moved = desc::DescribedGroup::default().with_error_code(codes::NOT_COORDINATOR);
    h.answer_body(&rb, described_group(moved));
    let rb = next(&mut h);
    assert!(is_read_back(&rb), "read again: {rb:?}");
    let refused =
        desc::DescribedGroup::default().with_error_code(codes::GROUP_AUTHORIZATION_FAILED);
    h.answer_body(&rb, described_group(refused));
    let (hb, b) = h.expect_hb();
    assert_eq!(
        owned_of(&b),
        Some(t.clone()),
        "the heartbeat goes at once, full"
    );
    h.hb_answer(&hb, err(codes::NOT_COORDINATOR));
    let rb = next(&mut h);
    assert!(is_read_back(&rb), "{rb:?}");
    h.answer_body(&rb, described(0, &tasks(&[("0", 5)], &[], &[])));
    assert_eq!(
        h.m.tasks(),
        &t,
        "a record below the member's epoch is no answer"
    );
    let (hb, _) = h.expect_hb();
    h.hb_answer(&hb, err(codes::COORDINATOR_LOAD_IN_PROGRESS));
    let out = next(&mut h);
    assert!(!is_read_back(&out), "nothing was processed: {out:?}");
    h.hb_answer(&out, err(codes::COORDINATOR_NOT_AVAILABLE));
    let rb = next(&mut h);
    assert!(is_read_back(&rb), "{rb:?}");
    h.answer_body(&rb, described_group(desc::DescribedGroup::default()));
    let (hb, _) = h.expect_hb();
    h.hb_answer(&hb, ok(1, None));
    assert_eq!(h.m.state(), MemberState::Stable);
    assert_eq!(h.m.tasks(), &t);
}

/// The internal topics Kafka Streams 4.4 declares, as it sends them (kafka-clients'
/// `Topology.toString()` of a joining heartbeat, tests/common/streams_peer.rs
/// `java_join_topology`): replication factor -1 and partitions 0 unless set, configs sorted by
/// key. A group Kafka Streams created refuses any other topology (INVALID_REQUEST).
#[test]
fn internal_topic_builders_match_what_kafka_streams_declares() {
    let mut source = Subtopology::new("0", ["in".to_owned()]);
    source
        .repartition_sink_topics
        .insert("app-rekey-repartition".into());
    let counting = Subtopology::new("1", Vec::<String>::new())
        .with_changelog(InternalTopic::changelog("app-counts-changelog"))
        .with_repartition_source(InternalTopic::repartition("app-rekey-repartition"));
    let wire = StreamsTopology::new(0, vec![source, counting]).to_wire();
    let s1 = &wire.subtopologies[1];
    let text = |t: &crate::messages::streams_group_heartbeat_request::TopicInfo| {
        let configs: Vec<String> = (t.topic_configs.iter())
            .map(|kv| format!("{}={}", kv.key.as_str(), kv.value.as_str()))
            .collect();
        format!(
            "{} {} {} {}",
            t.name.0.as_str(),
            t.partitions,
            t.replication_factor,
            configs.join(",")
        )
    };
    assert_eq!(
        text(&s1.state_changelog_topics[0]),
        "app-counts-changelog 0 -1 cleanup.policy=compact,message.timestamp.type=CreateTime"
    );
    assert_eq!(
        text(&s1.repartition_source_topics[0]),
        "app-rekey-repartition 0 -1 cleanup.policy=delete,message.timestamp.type=CreateTime,\
         retention.ms=-1,segment.bytes=52428800"
    );
}

// ------------------------------------------------------ the topology description (KIP-1331)

/// The description of this file's topology: "0" reads `in-a`, `in-b` into a counting processor
/// with a store and a sink to `app-rep`; "1" reads `app-rep`; one global store.
fn description() -> TopologyDescription {
    TopologyDescription::new(vec![
        SubtopologyDescription::new(
            "0",
            vec![
                NodeDescription::source("KSTREAM-SOURCE-0000000000", ["in-a", "in-b"])
                    .with_successors(["KSTREAM-AGGREGATE-0000000001"]),
                NodeDescription::processor("KSTREAM-AGGREGATE-0000000001", ["app-store"])
                    .with_successors(["KSTREAM-SINK-0000000002"]),
                NodeDescription::sink("KSTREAM-SINK-0000000002", Some("app-rep")),
            ],
        ),
        SubtopologyDescription::new(
            "1",
            vec![NodeDescription::source(
                "KSTREAM-SOURCE-0000000003",
                ["app-rep"],
            )],
        ),
    ])
    .with_global_store(
        NodeDescription::source("KSTREAM-SOURCE-0000000004", ["global-in"])
            .with_successors(["KTABLE-SOURCE-0000000005"]),
        NodeDescription::processor("KTABLE-SOURCE-0000000005", ["global-store"]),
    )
}

impl Harness {
    /// A dynamic member configured with [`description`].
    fn describing() -> Self {
        Self::start(|now| {
            StreamsMember::with_member_id(
                config(None),
                streams_config().with_topology_description(description()),
                process(),
                MemberId::parse(ID).unwrap(),
                now,
            )
            .unwrap()
        })
    }

    /// The next regular heartbeat (one interval on), answered at epoch 1 with the topology
    /// description asked for (`required`) or not.
    fn beat(&mut self, required: bool) {
        self.advance(Duration::from_secs(1));
        let (hb, _) = self.expect_hb();
        self.hb_answer(
            &hb,
            ok(1, None).with_topology_description_required(required),
        );
    }
}

fn push_of(out: &Outbound) -> &crate::messages::StreamsGroupTopologyDescriptionUpdateRequest {
    match &out.request {
        Request::StreamsGroupTopologyDescriptionUpdate { body, versions } => {
            assert_eq!(*versions, 0..=0);
            body
        }
        other => panic!("expected a StreamsGroupTopologyDescriptionUpdate, got {other:?}"),
    }
}

fn push_answer(code: i16) -> ResponseBody {
    ResponseBody::StreamsGroupTopologyDescriptionUpdate(
        crate::messages::StreamsGroupTopologyDescriptionUpdateResponse::default()
            .with_error_code(code)
            .with_error_message((code != codes::NONE).then(|| s("why"))),
    )
}

fn pushed_of(events: &[StreamsEvent]) -> Vec<(i32, Result<(), DescriptionPushError>)> {
    picked!(
        events,
        StreamsEvent::TopologyDescriptionPushed { topology_epoch, result } => {
            (*topology_epoch, result.clone())
        }
    )
}

#[test]
fn the_description_is_pushed_once_when_the_coordinator_asks() {
    let mut h = Harness::describing().joined_with(&StreamsTasks::default());
    // Not asked: nothing.
    h.beat(false);
    h.nothing("not asked for the description");
    h.beat(true);
    let push = h.one();
    assert!(matches!(push.target, Target::Coordinator(_)));
    assert_eq!(
        push.request.api_key(),
        Api::STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE
    );
    let b = push_of(&push);
    assert_eq!(b.group_id.0.as_str(), "app");
    assert_eq!(b.member_id.as_str(), ID);
    assert_eq!(b.topology_epoch, 7);
    let d = &b.topology_description;
    assert_eq!(d.subtopologies.len(), 2);
    let nodes = &d.subtopologies[0].nodes;
    assert_eq!(d.subtopologies[0].subtopology_id.as_str(), "0");
    assert_eq!(
        (nodes[0].node_type, nodes[1].node_type, nodes[2].node_type),
        (1, 2, 3)
    );
    let topics: Vec<&str> = nodes[0]
        .source_topics
        .iter()
        .map(|t| t.0.as_str())
        .collect();
    assert_eq!(topics, ["in-a", "in-b"]);
    assert_eq!(nodes[1].stores[0].as_str(), "app-store");
    assert_eq!(
        nodes[2].sink_topic.as_ref().map(|t| t.0.as_str()),
        Some("app-rep")
    );
    assert_eq!(
        nodes[0].successors[0].as_str(),
        "KSTREAM-AGGREGATE-0000000001"
    );
    assert_eq!(d.global_stores.len(), 1);
    assert_eq!(
        d.global_stores[0].processor.stores[0].as_str(),
        "global-store"
    );
    // One in flight: asked again meanwhile, nothing more goes out.
    h.beat(true);
    h.nothing("a push is in flight");
    h.answer_body(&push, push_answer(codes::NONE));
    assert_eq!(pushed_of(&h.take_events()), [(7, Ok(()))]);
    h.nothing("stored");
    h.beat(false);
    h.nothing("stored, not asked");
    // Asked again later (another topology epoch of the group, a plugin that lost it): again.
    h.beat(true);
    let again = h.one();
    push_of(&again);
    assert_eq!(h.m.state(), MemberState::Stable);
}

#[test]
fn without_a_description_nothing_is_pushed() {
    let mut h = Harness::joined(None, &tasks(&[("0", 0)], &[], &[]));
    for _ in 0..3 {
        h.beat(true);
        h.nothing("no description configured");
    }
    assert!(pushed_of(&h.take_events()).is_empty());
    assert_eq!(h.m.state(), MemberState::Stable);
}

#[test]
fn a_retriable_push_failure_is_retried_after_the_next_heartbeat() {
    let mut h = Harness::describing().joined_with(&StreamsTasks::default());
    h.beat(true);
    let push = h.one();
    h.answer_body(&push, push_answer(codes::COORDINATOR_LOAD_IN_PROGRESS));
    h.nothing("retried after the next heartbeat answer only");
    assert!(pushed_of(&h.take_events()).is_empty());
    h.beat(false);
    let retry = h.one();
    push_of(&retry);
    // Lost in the transport: the coordinator is looked up again, then the push follows the
    // next heartbeat answer.
    h.fail(&retry);
    let fc = h.one();
    assert!(is_find_coordinator(&fc), "{fc:?}");
    h.answer_lookup(&fc, "app");
    h.nothing("the push waits for a heartbeat answer");
    h.beat(false);
    let retry = h.one();
    push_of(&retry);
    // NOT_COORDINATOR: looked up again too.
    h.answer_body(&retry, push_answer(codes::NOT_COORDINATOR));
    let fc = h.one();
    assert!(is_find_coordinator(&fc), "{fc:?}");
    h.answer_lookup(&fc, "app");
    h.beat(false);
    let retry = h.one();
    h.answer_body(&retry, push_answer(codes::NONE));
    assert_eq!(pushed_of(&h.take_events()), [(7, Ok(()))]);
}

#[test]
fn a_refused_push_waits_for_the_next_ask_and_a_permanent_refusal_stops_pushing() {
    // The plugin failed (transient or permanent, the client cannot tell): typed, and pushed
    // again only when the coordinator asks again.
    let mut h = Harness::describing().joined_with(&StreamsTasks::default());
    h.beat(true);
    let push = h.one();
    h.answer_body(
        &push,
        push_answer(codes::STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED),
    );
    assert_eq!(
        pushed_of(&h.take_events()),
        [(
            7,
            Err(DescriptionPushError::UpdateFailed {
                message: Some("why".into())
            })
        )]
    );
    h.beat(false);
    h.nothing("not asked again");
    for (code, error) in [
        (
            codes::UNKNOWN_MEMBER_ID,
            DescriptionPushError::NotMember {
                code: codes::UNKNOWN_MEMBER_ID,
                message: Some("why".into()),
            },
        ),
        (
            codes::GROUP_AUTHORIZATION_FAILED,
            DescriptionPushError::Authorization {
                message: Some("why".into()),
            },
        ),
        (
            codes::UNKNOWN_SERVER_ERROR,
            DescriptionPushError::Other {
                code: codes::UNKNOWN_SERVER_ERROR,
                message: Some("why".into()),
            },
        ),
    ] {
        h.beat(true);
        let push = h.one();
        h.answer_body(&push, push_answer(code));
        assert_eq!(pushed_of(&h.take_events()), [(7, Err(error))]);
        // The member itself carries on: its heartbeat says what it needs to know.
        assert_eq!(h.m.state(), MemberState::Stable);
    }
    // INVALID_REQUEST (not the group's topology epoch): the same push would be refused again.
    h.beat(true);
    let push = h.one();
    h.answer_body(&push, push_answer(codes::INVALID_REQUEST));
    assert!(matches!(
        pushed_of(&h.take_events())[..],
        [(7, Err(DescriptionPushError::InvalidRequest { .. }))]
    ));
    h.beat(true);
    h.nothing("stopped at this topology epoch");
    // It stays stopped through a rejoin (same topology epoch).
    h.advance(Duration::from_secs(1));
    let (hb, _) = h.expect_hb();
    h.hb_answer(&hb, err(codes::UNKNOWN_MEMBER_ID));
    let (join, b) = h.expect_hb();
    assert_eq!(b.member_epoch, 0);
    h.hb_answer(&join, ok(2, None).with_topology_description_required(true));
    h.nothing("stopped at this topology epoch");
}

#[test]
fn a_broker_without_the_plugin_or_the_api_stops_the_pushes() {
    for unsupported in [true, false] {
        let mut h = Harness::describing().joined_with(&StreamsTasks::default());
        h.beat(true);
        let push = h.one();
        if unsupported {
            h.answer_body(&push, push_answer(codes::UNSUPPORTED_VERSION));
        } else {
            h.m.handle_response(
                push.id,
                Err(TransportError::UnsupportedApi {
                    api: Api::STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE,
                    ours: 0..=0,
                    broker: None,
                }),
                h.now,
            );
        }
        assert!(matches!(
            pushed_of(&h.take_events())[..],
            [(7, Err(DescriptionPushError::Unsupported { .. }))]
        ));
        for _ in 0..2 {
            h.beat(true);
            h.nothing("no more pushes");
        }
        assert_eq!(h.m.state(), MemberState::Stable);
    }
}

#[test]
fn a_push_answer_after_the_membership_changed_is_ignored() {
    // Fenced while the push is in flight: its answer is ignored, and the rejoined member
    // pushes when asked again.
    let mut h = Harness::describing().joined_with(&StreamsTasks::default());
    h.beat(true);
    let push = h.one();
    h.advance(Duration::from_secs(1));
    let (hb, _) = h.expect_hb();
    h.hb_answer(&hb, err(codes::FENCED_MEMBER_EPOCH));
    let (join, _) = h.expect_hb();
    h.answer_body(&push, push_answer(codes::NONE));
    h.answer_body(&push, push_answer(codes::NONE));
    assert!(pushed_of(&h.take_events()).is_empty());
    h.hb_answer(&join, ok(3, None).with_topology_description_required(true));
    let again = h.one();
    push_of(&again);
    h.answer_body(&again, push_answer(codes::NONE));
    assert_eq!(pushed_of(&h.take_events()), [(7, Ok(()))]);

    // Asked, then closed before the push went out: the leave goes, no push; an answer to a
    // push in flight after the close is ignored.
    for sent in [false, true] {
        let mut h = Harness::describing().joined_with(&StreamsTasks::default());
        h.beat(true);
        let push = sent.then(|| h.one());
        h.m.close(CloseOptions::Default, h.now);
        let (leave, b) = h.expect_hb();
        assert_eq!(b.member_epoch, -1);
        if let Some(push) = &push {
            // Answered while the leave is on its way: the description was stored.
            h.answer_body(push, push_answer(codes::NONE));
            assert_eq!(pushed_of(&h.take_events()), [(7, Ok(()))]);
        }
        h.hb_answer(&leave, ok(-1, None));
        h.nothing("closed");
        assert!(pushed_of(&h.take_events()).is_empty());
        assert_eq!(h.m.state(), MemberState::Closed);
        // Answers to anything after the close: nothing, no panic.
        if let Some(push) = &push {
            h.answer_body(push, push_answer(codes::NOT_COORDINATOR));
            h.fail(push);
        }
        h.nothing("closed");
    }
}

#[test]
fn no_push_goes_before_the_member_has_an_epoch_or_while_it_leaves() {
    // The join answer asks (epoch 1 from it on): the push follows it.
    let mut h = Harness::describing();
    h.m.join(h.now).unwrap();
    h.find_coordinator();
    let (join, _) = h.expect_hb();
    h.hb_answer(&join, ok(1, None).with_topology_description_required(true));
    let push = h.one();
    push_of(&push);
    // A heartbeat answer at a negative epoch (a leave's) is no ask.
    let mut h = Harness::describing().joined_with(&StreamsTasks::default());
    h.m.unsubscribe(h.now);
    let (leave, _) = h.expect_hb();
    h.hb_answer(
        &leave,
        ok(-1, None).with_topology_description_required(true),
    );
    h.nothing("left");
    assert_eq!(h.m.state(), MemberState::Unsubscribed);
}

#[test]
fn a_description_the_broker_would_refuse_is_a_config_error() {
    let bad = TopologyDescription::default().with_global_store(
        NodeDescription::processor("p", ["s"]),
        NodeDescription::source("s", ["t"]),
    );
    let e = StreamsMember::with_member_id(
        config(None),
        streams_config().with_topology_description(bad),
        process(),
        MemberId::parse(ID).unwrap(),
        crate::testutil::epoch(),
    )
    .unwrap_err();
    assert_eq!(e.key, "topology_description");
    let dup = TopologyDescription::new(vec![
        SubtopologyDescription::new("0", vec![]),
        SubtopologyDescription::new("0", vec![]),
    ]);
    assert!(dup.validate().is_err());
    let names = TopologyDescription::new(vec![SubtopologyDescription::new(
        "0",
        vec![
            NodeDescription::sink("n", None),
            NodeDescription::sink("n", None),
        ],
    )]);
    assert!(names.validate().is_err());
    assert!(description().validate().is_ok());
}

#[test]
fn a_described_topology_reads_back_as_pushed() {
    // The broker keeps what each node kind carries and serves it in StreamsGroupDescribe v1
    // (StreamsGroupTopologyDescriptionConverter): the same fields under the describe schema.
    let wire = description().to_wire();
    let node = |n: &crate::messages::streams_group_topology_description_update_request::TopologyDescriptionNode| {
        desc::TopologyDescriptionNode::default()
            .with_name(n.name.clone())
            .with_node_type(n.node_type)
            .with_source_topics(n.source_topics.clone())
            .with_sink_topic(n.sink_topic.clone())
            .with_stores(n.stores.clone())
            .with_successors(n.successors.clone())
    };
    let served = desc::TopologyDescription::default()
        .with_subtopologies(
            wire.subtopologies
                .iter()
                .map(|s| {
                    desc::TopologyDescriptionSubtopology::default()
                        .with_subtopology_id(s.subtopology_id.clone())
                        .with_nodes(s.nodes.iter().map(node).collect())
                })
                .collect(),
        )
        .with_global_stores(
            wire.global_stores
                .iter()
                .map(|g| {
                    desc::TopologyDescriptionGlobalStore::default()
                        .with_source(node(&g.source))
                        .with_processor(node(&g.processor))
                })
                .collect(),
        );
    assert_eq!(
        TopologyDescription::from_describe(&served),
        Some(description())
    );
    let mut unknown = served.clone();
    unknown.subtopologies[0].nodes[0].node_type = 9;
    assert_eq!(TopologyDescription::from_describe(&unknown), None);
    assert_eq!(
        DescriptionStatus::from_code(3),
        DescriptionStatus::Available
    );
    assert_eq!(
        DescriptionStatus::from_code(1),
        DescriptionStatus::NotStored
    );
    assert_eq!(
        DescriptionStatus::from_code(7),
        DescriptionStatus::Unknown(7)
    );
}
