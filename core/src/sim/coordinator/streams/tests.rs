//! Tests of the streams-group model: KAFKA-21401's steps, the assignor, membership rules,
//! timeouts and statuses.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kafka_protocol::messages::{GroupId, TopicName};

use super::group::Tasks;
use super::scenario::ids::*;
use super::scenario::*;
use super::*;
use crate::messages::streams_group_describe_request::StreamsGroupDescribeRequest;

fn t(p: i32) -> Task {
    ("0".to_string(), p)
}

fn set(ps: &[i32]) -> BTreeSet<Task> {
    ps.iter().map(|p| t(*p)).collect()
}

/// (member id, process, active, standby, pending standby) of every member.
type Row = (&'static str, &'static str, Vec<i32>, Vec<i32>, Vec<i32>);

/// A [`Row`] as sets.
type RowSets = (
    String,
    String,
    BTreeSet<Task>,
    BTreeSet<Task>,
    BTreeSet<Task>,
);

fn assert_table(step: &Step, rows: &[Row]) {
    let got: Vec<RowSets> = step
        .members
        .iter()
        .map(|m| {
            (
                m.member_id.clone(),
                m.process_id.clone(),
                m.active.clone(),
                m.standby.clone(),
                m.pending_standby.clone(),
            )
        })
        .collect();
    let want: Vec<_> = rows
        .iter()
        .map(|(id, p, a, s, ps)| (id.to_string(), p.to_string(), set(a), set(s), set(ps)))
        .collect();
    assert_eq!(got, want, "{}", step.label);
}

/// The seed's tables for steps 1-7 (the same with either index).
fn assert_steps_1_to_7(steps: &[Step]) {
    assert_table(
        &steps[0],
        &[
            (A1, "Pold", vec![0], vec![], vec![]),
            (A2, "Pold", vec![1], vec![2], vec![]),
            (B, "Q", vec![2], vec![0, 1], vec![]),
        ],
    );
    // 2. Only the retained records: A1 and A2 in epoch -2 with their tasks.
    assert_table(
        &steps[1],
        &[
            (A1, "Pold", vec![0], vec![], vec![]),
            (A2, "Pold", vec![1], vec![2], vec![]),
            (B, "Q", vec![2], vec![0, 1], vec![]),
        ],
    );
    assert!(
        steps[1]
            .members
            .iter()
            .filter(|m| m.member_id != B)
            .all(|m| m.epoch == -2)
    );
    assert_table(
        &steps[2],
        &[
            (A2, "Pold", vec![1], vec![2], vec![]),
            (B, "Q", vec![2], vec![0, 1], vec![]),
            (A1_NEW, "Pnew", vec![0], vec![1, 2], vec![]),
        ],
    );
    // 4. A2 inherits standby 0_2 on Pnew while A1 still holds it.
    assert_table(
        &steps[3],
        &[
            (B, "Q", vec![2], vec![0, 1], vec![]),
            (A2_NEW, "Pnew", vec![1], vec![2], vec![]),
            (A1_NEW, "Pnew", vec![0], vec![1, 2], vec![]),
        ],
    );
    assert_table(
        &steps[4],
        &[
            (B, "Q", vec![2], vec![0, 1], vec![]),
            (A2_NEW, "Pnew", vec![1], vec![2], vec![]),
            (A1_NEW, "Pnew", vec![0], vec![], vec![1, 2]),
        ],
    );
    assert_eq!(steps[4].members[2].state, "UNREVOKED_TASKS");
    assert_table(
        &steps[5],
        &[
            (B, "Q", vec![2], vec![0, 1], vec![]),
            (A2_NEW, "Pnew", vec![1], vec![2], vec![]),
            (A1_NEW, "Pnew", vec![0], vec![], vec![]),
        ],
    );
    assert_table(
        &steps[6],
        &[
            (A2_NEW, "Pnew", vec![1], vec![2], vec![]),
            (A1_NEW, "Pnew", vec![0], vec![], vec![]),
        ],
    );
}

fn answer_active(a: &StreamsGroupHeartbeatResponse) -> Option<BTreeSet<Task>> {
    a.active_tasks.as_ref().map(|l| {
        l.iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.subtopology_id.to_string(), *p))
            })
            .collect()
    })
}

/// Every (process, task) held by two members, in any roles.
fn double_holdings(members: &[MemberView]) -> Vec<(String, Task)> {
    let mut seen: BTreeMap<(String, Task), usize> = BTreeMap::new();
    for m in members {
        for task in m
            .active
            .iter()
            .chain(&m.standby)
            .chain(&m.warmup)
            .chain(&m.pending_active)
            .chain(&m.pending_standby)
        {
            *seen
                .entry((m.process_id.clone(), task.clone()))
                .or_default() += 1;
        }
    }
    seen.into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(k, _)| k)
        .collect()
}

#[test]
fn kafka_21401_per_process_index_grants_active_beside_standby() {
    let run = kafka_21401(OwnershipIndex::PerProcess, crate::testutil::epoch());
    assert_steps_1_to_7(&run.steps);
    // After step 6 the index has lost A2's standby 0_2 on Pnew.
    assert_eq!(
        run.script.groups.lost_index_entries("app"),
        vec![(t(2), "Pnew".to_string())]
    );
    // 8. A3's answer assigns active 0_2 while A2 still holds standby 0_2 on Pnew.
    assert_eq!(run.a3_answer.error_code, 0);
    assert_eq!(answer_active(&run.a3_answer), Some(set(&[2])));
    assert_table(
        &run.steps[7],
        &[
            (A2_NEW, "Pnew", vec![1], vec![2], vec![]),
            (A1_NEW, "Pnew", vec![0], vec![], vec![]),
            (A3, "Pnew", vec![2], vec![], vec![]),
        ],
    );
    assert_eq!(
        double_holdings(&run.steps[7].members),
        vec![("Pnew".to_string(), t(2))]
    );
}

#[test]
fn kafka_21401_per_member_index_withholds_until_released() {
    let run = kafka_21401(OwnershipIndex::PerMember, crate::testutil::epoch());
    assert_steps_1_to_7(&run.steps);
    // 8. Active 0_2 is withheld from A3 while A2 holds standby 0_2 on Pnew.
    assert_eq!(answer_active(&run.a3_answer), Some(set(&[])));
    let mut sc = run.script;
    let a3 = sc.view().into_iter().find(|m| m.member_id == A3).unwrap();
    assert_eq!(
        (a3.state, a3.target_active.clone()),
        ("UNRELEASED_TASKS", set(&[2]))
    );
    assert!(double_holdings(&sc.view()).is_empty());
    // A2 is told to revoke standby 0_2; until it acknowledges, A3 still waits.
    sc.heartbeat(A2_NEW);
    let a2 = sc
        .view()
        .into_iter()
        .find(|m| m.member_id == A2_NEW)
        .unwrap();
    assert_eq!(
        (a2.state, a2.pending_standby.clone()),
        ("UNREVOKED_TASKS", set(&[2]))
    );
    assert_eq!(answer_active(&sc.heartbeat(A3)), None);
    assert!(double_holdings(&sc.view()).is_empty());
    // A2 acknowledges: A3 gets 0_2 on its next heartbeat.
    sc.heartbeat(A2_NEW);
    assert_eq!(answer_active(&sc.heartbeat(A3)), Some(set(&[2])));
    let a3 = sc.view().into_iter().find(|m| m.member_id == A3).unwrap();
    assert_eq!((a3.state, a3.active), ("STABLE", set(&[2])));
    assert!(double_holdings(&sc.view()).is_empty());
}

mod assignor_tests {
    use super::super::assignor::{AssignorMember, AssignorSubtopology, assign};
    use super::*;

    fn run(members: &[(&str, &str, Tasks)], tasks: i32, standby: u32) -> BTreeMap<String, Tasks> {
        let input: Vec<AssignorMember<'_>> = members
            .iter()
            .map(|(m, p, c)| AssignorMember {
                member_id: m,
                process_id: p,
                current: c,
                task_offsets: None,
            })
            .collect();
        let subs = [AssignorSubtopology {
            id: "0",
            num_tasks: tasks,
            stateful: true,
        }];
        assign(&input, &subs, standby)
    }

    fn check(members: &[(&str, &str, Tasks)], out: &BTreeMap<String, Tasks>, tasks: i32) {
        let process: BTreeMap<&str, &str> = members.iter().map(|(m, p, _)| (*m, *p)).collect();
        // Every active task exactly once.
        let mut actives: Vec<Task> = out
            .values()
            .flat_map(|t| t.active.iter().cloned())
            .collect();
        actives.sort();
        assert_eq!(actives, (0..tasks).map(t).collect::<Vec<_>>());
        // No task twice on one process (standby never on the active's process).
        let mut per_process: BTreeSet<(&str, Task)> = BTreeSet::new();
        for (m, ts) in out {
            for task in ts.active.iter().chain(&ts.standby) {
                assert!(
                    per_process.insert((process[m.as_str()], task.clone())),
                    "{task:?} twice on {}",
                    process[m.as_str()]
                );
            }
        }
    }

    #[test]
    fn balanced_with_standbys_on_other_processes() {
        let members = [
            ("a", "P1", Tasks::default()),
            ("b", "P2", Tasks::default()),
            ("c", "P3", Tasks::default()),
        ];
        let out = run(&members, 6, 1);
        check(&members, &out, 6);
        for ts in out.values() {
            assert_eq!((ts.active.len(), ts.standby.len()), (2, 2));
        }
    }

    #[test]
    fn sticky_actives_and_standbys() {
        let cur = |a: &[i32], s: &[i32]| Tasks {
            active: set(a),
            standby: set(s),
            warmup: BTreeSet::new(),
        };
        let members = [
            ("a", "P1", cur(&[3, 4, 5], &[0])),
            ("b", "P2", cur(&[0, 1, 2], &[3])),
        ];
        let out = run(&members, 6, 1);
        check(&members, &out, 6);
        assert_eq!(out["a"].active, set(&[3, 4, 5]));
        assert_eq!(out["b"].active, set(&[0, 1, 2]));
        // The previous standbys are kept.
        assert!(out["a"].standby.contains(&t(0)) && out["b"].standby.contains(&t(3)));
        // A new member takes a fair share.
        let members = [
            members[0].clone(),
            members[1].clone(),
            ("c", "P3", Tasks::default()),
        ];
        let out = run(&members, 6, 1);
        check(&members, &out, 6);
        assert!(out.values().all(|ts| ts.active.len() == 2));
        assert!(
            out["a"].active.is_subset(&set(&[3, 4, 5]))
                && out["b"].active.is_subset(&set(&[0, 1, 2]))
        );
    }

    #[test]
    fn standbys_limited_by_processes() {
        // Two processes, two members each, two standby replicas: one standby per task, never on
        // the process of its active.
        let members = [
            ("a", "P1", Tasks::default()),
            ("b", "P1", Tasks::default()),
            ("c", "P2", Tasks::default()),
            ("d", "P2", Tasks::default()),
        ];
        let out = run(&members, 4, 2);
        check(&members, &out, 4);
        let standbys: usize = out.values().map(|ts| ts.standby.len()).sum();
        assert_eq!(standbys, 4);
        assert!(out.values().all(|ts| ts.active.len() == 1));
    }
}

fn topics3() -> BTreeMap<String, i32> {
    BTreeMap::from([("input".to_owned(), 3), ("store-changelog".to_owned(), 3)])
}

fn script(standby: u32) -> Script {
    let config = StreamsGroupSettings {
        num_standby_replicas: standby,
        ..StreamsGroupSettings::default()
    };
    Script::new(
        config,
        topics3(),
        one_stateful_subtopology(),
        crate::testutil::epoch(),
    )
}

#[test]
fn static_rejoin_inherits_the_assignment() {
    let mut sc = script(0);
    sc.join("s1", Some("i1"), "P1");
    sc.join("d1", None, "P2");
    assert!(sc.settle(10));
    let before = sc.view().into_iter().find(|m| m.member_id == "s1").unwrap();
    let epochs = sc.groups.epochs("app").unwrap();
    assert_eq!(sc.leave("s1", -2).member_epoch, -2);
    // A new member id, same instance id and process: the replacement gets the old member's
    // tasks in its join answer, without a group epoch bump.
    let answer = sc.join("s1-new", Some("i1"), "P1");
    assert_eq!(
        (answer.error_code, answer.member_id.as_str()),
        (0, "s1-new")
    );
    assert_eq!(answer_active(&answer), Some(before.active.clone()));
    assert_eq!(sc.groups.epochs("app").unwrap().1, epochs.1);
    let ids: Vec<String> = sc.view().into_iter().map(|m| m.member_id).collect();
    assert_eq!(ids, vec!["d1", "s1-new"]);
}

#[test]
fn unreleased_and_fenced_instance_ids() {
    let mut sc = script(0);
    sc.join("s1", Some("i1"), "P1");
    // The instance id is held by a member that did not leave with -2.
    let a = sc.join("s2", Some("i1"), "P1");
    assert_eq!(a.error_code, UNRELEASED_INSTANCE_ID);
    // Another member id heartbeating with the instance id is fenced.
    sc.members.get_mut("s2").unwrap().epoch = 1;
    assert_eq!(sc.heartbeat("s2").error_code, FENCED_INSTANCE_ID);
    // The instance id is not known at all.
    sc.members.get_mut("s2").unwrap().instance_id = Some("i9".into());
    assert_eq!(sc.heartbeat("s2").error_code, UNKNOWN_MEMBER_ID);
}

#[test]
fn member_epoch_fencing() {
    let mut sc = script(0);
    sc.join("d1", None, "P1");
    let epoch = sc.members["d1"].epoch;
    sc.members.get_mut("d1").unwrap().epoch = epoch + 1;
    assert_eq!(sc.heartbeat("d1").error_code, FENCED_MEMBER_EPOCH);
    sc.members.get_mut("d1").unwrap().epoch = epoch;
    assert_eq!(sc.heartbeat("d1").error_code, 0);
    // A smaller epoch is accepted only as the previous one with the reported tasks still
    // assigned: reporting d2's tasks is fenced.
    sc.join("d2", None, "P2");
    assert!(sc.settle(10));
    let e = sc.members["d1"].epoch;
    let d2_tasks = sc.members["d2"].active.clone();
    let d1 = sc.members.get_mut("d1").unwrap();
    d1.epoch = e - 1;
    d1.active = d2_tasks;
    assert_eq!(sc.heartbeat("d1").error_code, FENCED_MEMBER_EPOCH);
    sc.members.insert(
        "d9".into(),
        ScriptMember {
            epoch: 1,
            ..ScriptMember::default()
        },
    );
    assert_eq!(sc.heartbeat("d9").error_code, UNKNOWN_MEMBER_ID);
}

#[test]
fn leave_with_minus_one_reassigns() {
    let mut sc = script(0);
    sc.join("d1", None, "P1");
    sc.join("d2", None, "P2");
    assert!(sc.settle(10));
    assert!(sc.view().iter().all(|m| !m.active.is_empty()));
    let before = sc.groups.epochs("app").unwrap().1;
    let a = sc.leave("d2", -1);
    assert_eq!((a.error_code, a.member_epoch), (0, -1));
    assert_eq!(sc.groups.epochs("app").unwrap().1, before + 1);
    assert!(sc.settle(10));
    let view = sc.view();
    assert_eq!(view.len(), 1);
    assert_eq!(view[0].active, set(&[0, 1, 2]));
}

#[test]
fn session_expiry_removes_members_and_static_members_after_minus_two() {
    let mut sc = script(0);
    sc.join("d1", None, "P1");
    sc.join("s1", Some("i1"), "P2");
    sc.settle(10);
    sc.leave("s1", -2);
    // d1 heartbeats on; s1's session runs from its last heartbeat and expires first.
    sc.heartbeat("d1");
    let d1_deadline = sc.now + Duration::from_secs(45);
    let deadline = sc.groups.next_deadline().unwrap();
    assert!(deadline < d1_deadline);
    sc.groups.expire(deadline - Duration::from_millis(1));
    assert_eq!(sc.view().len(), 2);
    sc.groups.expire(deadline);
    let ids: Vec<String> = sc.view().into_iter().map(|m| m.member_id).collect();
    assert_eq!(ids, vec!["d1"]);
    assert_eq!(sc.groups.next_deadline(), Some(d1_deadline));
    sc.groups.expire(d1_deadline);
    assert!(sc.view().is_empty());
    assert_eq!(sc.groups.epochs("app").unwrap().0, "Empty");
}

#[test]
fn statuses_and_internal_topic_creation() {
    let config = StreamsGroupSettings::default();
    let mut sc = Script::new(
        config,
        BTreeMap::new(),
        one_stateful_subtopology(),
        crate::testutil::epoch(),
    );
    // No source topic.
    let a = sc.join("d1", None, "P1");
    let status = a.status.clone().unwrap();
    assert_eq!(status.len(), 1);
    assert_eq!(
        (status[0].status_code, status[0].status_detail.as_str()),
        (1, "Source topics input are missing.")
    );
    assert_eq!(answer_active(&a), Some(BTreeSet::new()));
    assert_eq!(sc.groups.epochs("app").unwrap().0, "NotReady");
    // The source topic appears: the changelog is missing, and created.
    sc.topics.insert("input".into(), 3);
    let a = sc.heartbeat("d1");
    let status = a.status.clone().unwrap();
    assert_eq!(status[0].status_code, 3);
    assert_eq!(
        sc.groups.internal_topics(),
        &BTreeMap::from([("store-changelog".to_owned(), 3)])
    );
    // Ready on the next heartbeat: all three tasks.
    let a = sc.heartbeat("d1");
    assert_eq!(a.status, Some(Vec::new()));
    assert_eq!(answer_active(&a), Some(set(&[0, 1, 2])));
    assert_eq!(sc.groups.epochs("app").unwrap().0, "Stable");
}

#[test]
fn incorrectly_partitioned_copartitioned_topics() {
    use crate::messages::streams_group_heartbeat_request as req;
    let topology = req::Topology::default()
        .with_epoch(0)
        .with_subtopologies(vec![
            req::Subtopology::default()
                .with_subtopology_id("0".to_string().into())
                .with_source_topics(vec![
                    TopicName("left".to_string().into()),
                    TopicName("right".to_string().into()),
                ])
                .with_copartition_groups(vec![
                    req::CopartitionGroup::default().with_source_topics(vec![0, 1]),
                ]),
        ]);
    let topics = BTreeMap::from([("left".to_owned(), 3), ("right".to_owned(), 2)]);
    let mut sc = Script::new(
        StreamsGroupSettings::default(),
        topics,
        topology,
        crate::testutil::epoch(),
    );
    let a = sc.join("d1", None, "P1");
    let status = a.status.unwrap();
    assert_eq!(status[0].status_code, 2);
    assert_eq!(
        status[0].status_detail.as_str(),
        "Following topics do not have the same number of partitions: [{left=3, right=2}]"
    );
    sc.topics.insert("right".into(), 3);
    let a = sc.heartbeat("d1");
    assert_eq!(answer_active(&a), Some(set(&[0, 1, 2])));
}

#[test]
fn request_validation() {
    let mut sc = script(0);
    let mut r = StreamsGroupHeartbeatRequest::default()
        .with_group_id(GroupId("app".to_string().into()))
        .with_member_id("m".to_string().into())
        .with_rebalance_timeout_ms(1000);
    let now = sc.now;
    let a = sc.groups.heartbeat(&r, 1, &topics3(), now);
    assert_eq!(
        (a.error_code, a.error_message.unwrap().as_str()),
        (
            INVALID_REQUEST,
            "Topology must be non-null when (re-)joining."
        )
    );
    let mut topology = one_stateful_subtopology();
    topology.subtopologies[0].state_changelog_topics[0].partitions = 3;
    r.topology = Some(topology);
    assert_eq!(
        sc.groups.heartbeat(&r, 1, &topics3(), now).error_code,
        STREAMS_INVALID_TOPOLOGY
    );
    r.topology = None;
    r.member_epoch = -3;
    assert_eq!(
        sc.groups.heartbeat(&r, 1, &topics3(), now).error_code,
        INVALID_REQUEST
    );
    r.member_epoch = 1;
    assert_eq!(
        sc.groups.heartbeat(&r, 1, &topics3(), now).error_code,
        GROUP_ID_NOT_FOUND
    );
    // A topology with another shape under the same epoch is refused.
    sc.join("d1", None, "P1");
    sc.topology.subtopologies[0]
        .source_topics
        .push(TopicName("other".to_string().into()));
    assert_eq!(sc.join("d2", None, "P1").error_code, INVALID_REQUEST);
}

#[test]
fn endpoints_and_describe() {
    use crate::messages::streams_group_heartbeat_request as req;
    let mut sc = script(1);
    sc.join("d1", None, "P1");
    // d2 joins with an endpoint: the endpoint epoch moves and the answer maps endpoints.
    let r = StreamsGroupHeartbeatRequest::default()
        .with_group_id(GroupId("app".to_string().into()))
        .with_member_id("d2".to_string().into())
        .with_rebalance_timeout_ms(1000)
        .with_topology(Some(one_stateful_subtopology()))
        .with_process_id(Some("P2".to_string().into()))
        .with_user_endpoint(Some(
            req::Endpoint::default()
                .with_host("h2".to_string().into())
                .with_port(7),
        ));
    sc.now += Duration::from_secs(1);
    let a = sc.groups.heartbeat(&r, 1, &topics3(), sc.now);
    assert_eq!(a.error_code, 0);
    assert_eq!(a.endpoint_information_epoch, 1);
    let eps = a.partitions_by_user_endpoint.unwrap();
    assert_eq!(eps.len(), 1);
    assert_eq!(eps[0].user_endpoint.host.as_str(), "h2");
    let d = sc.groups.describe(
        &StreamsGroupDescribeRequest::default().with_group_ids(vec![
            GroupId("app".to_string().into()),
            GroupId("nope".to_string().into()),
        ]),
        0,
    );
    assert_eq!(d.groups.len(), 2);
    let g = &d.groups[0];
    assert_eq!(
        (g.error_code, g.assignor_name.as_ref().unwrap().as_str()),
        (0, "sticky")
    );
    let procs: Vec<&str> = g.members.iter().map(|m| m.process_id.as_str()).collect();
    assert_eq!(procs, vec!["P1", "P2"]);
    let topo = g.topology.as_ref().unwrap().subtopologies.as_ref().unwrap();
    assert_eq!(topo[0].state_changelog_topics[0].partitions, 3);
    assert_eq!(d.groups[1].error_code, GROUP_ID_NOT_FOUND);
}

#[test]
fn rebalance_timeout_fences_a_member_that_does_not_revoke() {
    let mut sc = script(0);
    sc.join("d1", None, "P1");
    sc.join("d2", None, "P2");
    // d1 is told to revoke; it never heartbeats again.
    sc.heartbeat("d1");
    let d1 = sc.view().into_iter().find(|m| m.member_id == "d1").unwrap();
    assert_eq!(d1.state, "UNREVOKED_TASKS");
    // The rebalance timeout (30 s) comes before the session timeout (45 s).
    let deadline = sc.groups.next_deadline().unwrap();
    assert_eq!(deadline, sc.now + Duration::from_secs(30));
    sc.groups.expire(deadline);
    let ids: Vec<String> = sc.view().into_iter().map(|m| m.member_id).collect();
    assert_eq!(ids, vec!["d2"]);
}

/// A group with warm-ups: `refiner`, two warm-up replicas, no standbys.
fn warmup_script(refiner: WarmupRefiner) -> Script {
    let config = StreamsGroupSettings {
        warmup_refiner: refiner,
        ..StreamsGroupSettings::default()
    };
    Script::new(
        config,
        topics3(),
        one_stateful_subtopology(),
        crate::testutil::epoch(),
    )
}

/// a1 on P1 holds the three tasks; b1 joins on P2 and the target moves one of them to b1.
fn second_process_joins(sc: &mut Script) -> BTreeSet<Task> {
    sc.join("a1", None, "P1");
    assert!(sc.settle(10));
    sc.join("b1", None, "P2");
    assert!(sc.settle(10));
    let b1 = sc.view().into_iter().find(|m| m.member_id == "b1").unwrap();
    assert_eq!(b1.target_active.len(), 1, "{b1:?}");
    b1.target_active
}

#[test]
fn kafka_4_4_assigns_no_warmups() {
    // `AssignmentRefiner.refine` returns the target: the task moves at once.
    let mut sc = warmup_script(WarmupRefiner::Kafka44);
    let moved = second_process_joins(&mut sc);
    let b1 = sc.view().into_iter().find(|m| m.member_id == "b1").unwrap();
    assert_eq!(b1.active, moved);
    assert!(sc.view().iter().all(|m| m.warmup.is_empty()));
    // Offsets reported change nothing: no refinement step.
    let epochs = sc.groups.epochs("app").unwrap();
    let t = moved.iter().next().unwrap().clone();
    sc.heartbeat_with_offsets("b1", &[(t, 0, 100_000)]);
    assert!(sc.settle(10));
    assert_eq!(sc.groups.epochs("app").unwrap(), epochs);
    assert_eq!(sc.groups.warmup_stats(), WarmupStats::default());
}

#[test]
fn a_moving_task_is_warmed_up_then_promoted_once_caught_up() {
    let mut sc = warmup_script(WarmupRefiner::CurrentOwnerWarmup);
    let moved = second_process_joins(&mut sc);
    let t = moved.iter().next().unwrap().clone();
    let view = sc.view();
    let (a1, b1) = (&view[0], &view[1]);
    // The task stays active with a1 while b1 warms it up.
    assert_eq!(a1.active, set(&[0, 1, 2]));
    assert_eq!((b1.active.len(), &b1.warmup), (0, &moved));
    assert_eq!(sc.members["b1"].warmup, moved, "b1 was told");
    // Not caught up yet (lag 50,000 > 10,000): nothing moves.
    let epochs = sc.groups.epochs("app").unwrap();
    sc.heartbeat_with_offsets("b1", &[(t.clone(), 50_000, 100_000)]);
    assert!(sc.settle(10));
    assert_eq!(sc.groups.epochs("app").unwrap(), epochs);
    // Caught up: a refinement step (group epoch + 1, no assignor run) moves the task; b1's
    // warm-up becomes its active task in place once a1 released it.
    sc.heartbeat_with_offsets("b1", &[(t.clone(), 95_000, 100_000)]);
    let after = sc.groups.epochs("app").unwrap();
    assert_eq!((after.1, after.2), (epochs.1 + 1, epochs.2 + 1));
    assert!(sc.settle(10));
    let view = sc.view();
    let (a1, b1) = (&view[0], &view[1]);
    assert_eq!(b1.active, moved);
    assert!(b1.warmup.is_empty() && a1.warmup.is_empty());
    assert_eq!(a1.active, a1.target_active);
    let stats = sc.groups.warmup_stats();
    assert_eq!(
        (stats.granted, stats.promoted, stats.refinement_steps),
        (1, 1, 1)
    );
    assert!(sc.groups.refiner_faults().is_empty());
}

#[test]
fn no_warmup_within_a_process_nor_past_the_budget() {
    // A member of a1's own process takes the task at once (the state is the process's).
    let mut sc = warmup_script(WarmupRefiner::CurrentOwnerWarmup);
    sc.join("a1", None, "P1");
    assert!(sc.settle(10));
    sc.join("a2", None, "P1");
    assert!(sc.settle(10));
    assert!(
        sc.view()
            .iter()
            .all(|m| m.warmup.is_empty() && m.active == m.target_active)
    );
    // Budget 0 turns the refinement off (`numWarmupReplicas == 0`).
    let config = StreamsGroupSettings {
        warmup_refiner: WarmupRefiner::CurrentOwnerWarmup,
        num_warmup_replicas: 0,
        ..StreamsGroupSettings::default()
    };
    let mut sc = Script::new(
        config,
        topics3(),
        one_stateful_subtopology(),
        crate::testutil::epoch(),
    );
    second_process_joins(&mut sc);
    assert!(
        sc.view()
            .iter()
            .all(|m| m.warmup.is_empty() && m.active == m.target_active)
    );
}

#[test]
fn task_offsets_rank_standby_candidates() {
    use super::assignor::{AssignorMember, AssignorSubtopology, assign};
    // Task 0_0 active on m1 (P1); one standby. m3 (P3) reported an offset for 0_0: state on
    // local disk makes it a standby candidate (`collectStandbyCandidates`), ahead of the least
    // loaded process P2.
    let held = Tasks {
        active: set(&[0]),
        ..Tasks::default()
    };
    let none = Tasks::default();
    let offsets = BTreeMap::from([(t(0), 40_i64)]);
    let members = [
        AssignorMember {
            member_id: "m1",
            process_id: "P1",
            current: &held,
            task_offsets: None,
        },
        AssignorMember {
            member_id: "m2",
            process_id: "P2",
            current: &none,
            task_offsets: None,
        },
        AssignorMember {
            member_id: "m3",
            process_id: "P3",
            current: &none,
            task_offsets: Some(&offsets),
        },
    ];
    let subs = [AssignorSubtopology {
        id: "0",
        num_tasks: 1,
        stateful: true,
    }];
    let out = assign(&members, &subs, 1);
    assert_eq!(out["m1"].active, set(&[0]));
    assert_eq!(out["m3"].standby, set(&[0]), "{out:?}");
    // Without the report, the standby goes to the least loaded process in id order.
    let mut plain = members;
    plain[2].task_offsets = None;
    let out = assign(&plain, &subs, 1);
    assert_eq!(out["m2"].standby, set(&[0]), "{out:?}");
}
