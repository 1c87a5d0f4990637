//! Scripted streams-group scenarios: members that heartbeat [`StreamsGroups`] directly and
//! report exactly the tasks the coordinator last gave them (so they acknowledge a revocation
//! on their next heartbeat), and KAFKA-21401's steps 1-8.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{GroupId, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::{MemberView, OwnershipIndex, StreamsGroupSettings, StreamsGroups, Task};
use crate::messages::streams_group_heartbeat_request as req;
use crate::messages::streams_group_heartbeat_response as resp;
use crate::messages::{StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse};

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_owned())
}

/// A member of a [`Script`]: identity and what it holds.
#[derive(Debug, Clone, Default)]
pub struct ScriptMember {
    /// Instance id of a static member.
    pub instance_id: Option<String>,
    /// Process id it sends.
    pub process_id: String,
    /// Its member epoch, as last answered.
    pub epoch: i32,
    /// Active tasks it holds (the last assignment it was given).
    pub active: BTreeSet<Task>,
    /// Standby tasks it holds.
    pub standby: BTreeSet<Task>,
    /// Warm-up tasks it holds.
    pub warmup: BTreeSet<Task>,
}

/// One streams group driven by scripted heartbeats, one second apart.
#[derive(Debug, Clone)]
pub struct Script {
    /// The coordinator's streams groups.
    pub groups: StreamsGroups,
    /// The group id.
    pub group_id: String,
    /// The cluster's topics (name -> partitions).
    pub topics: BTreeMap<String, i32>,
    /// The topology members join with.
    pub topology: req::Topology,
    /// The members by member id.
    pub members: BTreeMap<String, ScriptMember>,
    /// The current time.
    pub now: Instant,
}

/// A topology of one stateful subtopology `0` reading `input` with the changelog
/// `store-changelog`.
pub fn one_stateful_subtopology() -> req::Topology {
    req::Topology::default()
        .with_epoch(0)
        .with_subtopologies(vec![
            req::Subtopology::default()
                .with_subtopology_id(s("0"))
                .with_source_topics(vec![TopicName(s("input"))])
                .with_state_changelog_topics(vec![
                    req::TopicInfo::default().with_name(TopicName(s("store-changelog"))),
                ]),
        ])
}

fn task_ids(tasks: &BTreeSet<Task>) -> Vec<req::TaskIds> {
    let mut by_sub: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (sub, p) in tasks {
        by_sub.entry(sub).or_default().push(*p);
    }
    by_sub
        .into_iter()
        .map(|(sub, ps)| {
            req::TaskIds::default()
                .with_subtopology_id(s(sub))
                .with_partitions(ps)
        })
        .collect()
}

fn from_ids(list: &[resp::TaskIds]) -> BTreeSet<Task> {
    list.iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.subtopology_id.to_string(), *p))
        })
        .collect()
}

impl Script {
    /// A group `app` with `topology`, on `topics`, starting at `now`.
    pub fn new(
        config: StreamsGroupSettings,
        topics: BTreeMap<String, i32>,
        topology: req::Topology,
        now: Instant,
    ) -> Self {
        Self {
            groups: StreamsGroups::new(config),
            group_id: "app".into(),
            topics,
            topology,
            members: BTreeMap::new(),
            now,
        }
    }

    fn send(
        &mut self,
        member_id: &str,
        request: StreamsGroupHeartbeatRequest,
    ) -> StreamsGroupHeartbeatResponse {
        self.now += Duration::from_secs(1);
        let answer = self.groups.heartbeat(&request, 1, &self.topics, self.now);
        if answer.error_code == 0 {
            let m = self.members.entry(member_id.to_owned()).or_default();
            m.epoch = answer.member_epoch;
            if let Some(a) = &answer.active_tasks {
                m.active = from_ids(a);
            }
            if let Some(a) = &answer.standby_tasks {
                m.standby = from_ids(a);
            }
            if let Some(a) = &answer.warmup_tasks {
                m.warmup = from_ids(a);
            }
        }
        answer
    }

    /// `member_id` joins (epoch 0) from `process_id`, static with `instance_id`, holding nothing.
    pub fn join(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        process_id: &str,
    ) -> StreamsGroupHeartbeatResponse {
        self.members.insert(
            member_id.to_owned(),
            ScriptMember {
                instance_id: instance_id.map(str::to_owned),
                process_id: process_id.to_owned(),
                ..ScriptMember::default()
            },
        );
        let request = StreamsGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(&self.group_id)))
            .with_member_id(s(member_id))
            .with_member_epoch(0)
            .with_instance_id(instance_id.map(s))
            .with_rebalance_timeout_ms(30_000)
            .with_topology(Some(self.topology.clone()))
            .with_process_id(Some(s(process_id)))
            .with_active_tasks(Some(Vec::new()))
            .with_standby_tasks(Some(Vec::new()))
            .with_warmup_tasks(Some(Vec::new()));
        self.send(member_id, request)
    }

    /// `member_id` heartbeats in its epoch, reporting the tasks it holds.
    pub fn heartbeat(&mut self, member_id: &str) -> StreamsGroupHeartbeatResponse {
        let m = self.members.get(member_id).cloned().unwrap_or_default();
        let request = StreamsGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(&self.group_id)))
            .with_member_id(s(member_id))
            .with_member_epoch(m.epoch)
            .with_instance_id(m.instance_id.as_deref().map(s))
            .with_active_tasks(Some(task_ids(&m.active)))
            .with_standby_tasks(Some(task_ids(&m.standby)))
            .with_warmup_tasks(Some(task_ids(&m.warmup)));
        self.send(member_id, request)
    }

    /// `member_id` heartbeats as [`Script::heartbeat`] does, reporting task offsets and end
    /// offsets for `offsets` ((task, offset, end offset)).
    pub fn heartbeat_with_offsets(
        &mut self,
        member_id: &str,
        offsets: &[(Task, i64, i64)],
    ) -> StreamsGroupHeartbeatResponse {
        let m = self.members.get(member_id).cloned().unwrap_or_default();
        let list = |end: bool| {
            offsets
                .iter()
                .map(|(t, o, e)| {
                    req::TaskOffset::default()
                        .with_subtopology_id(s(&t.0))
                        .with_partition(t.1)
                        .with_offset(if end { *e } else { *o })
                })
                .collect::<Vec<_>>()
        };
        let request = StreamsGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(&self.group_id)))
            .with_member_id(s(member_id))
            .with_member_epoch(m.epoch)
            .with_instance_id(m.instance_id.as_deref().map(s))
            .with_active_tasks(Some(task_ids(&m.active)))
            .with_standby_tasks(Some(task_ids(&m.standby)))
            .with_warmup_tasks(Some(task_ids(&m.warmup)))
            .with_task_offsets(Some(list(false)))
            .with_task_end_offsets(Some(list(true)));
        self.send(member_id, request)
    }

    /// `member_id` leaves with `epoch` (-1, or -2 for a static member's temporary leave).
    pub fn leave(&mut self, member_id: &str, epoch: i32) -> StreamsGroupHeartbeatResponse {
        let m = self.members.remove(member_id).unwrap_or_default();
        let request = StreamsGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(&self.group_id)))
            .with_member_id(s(member_id))
            .with_member_epoch(epoch)
            .with_instance_id(m.instance_id.as_deref().map(s));
        self.now += Duration::from_secs(1);
        self.groups.heartbeat(&request, 1, &self.topics, self.now)
    }

    /// Heartbeats every member in member-id order until none changes epoch or tasks (at most
    /// `rounds` rounds); true if it settled.
    pub fn settle(&mut self, rounds: usize) -> bool {
        for _ in 0..rounds {
            let before = self.groups.members(&self.group_id);
            let ids: Vec<String> = self.members.keys().cloned().collect();
            for id in ids {
                self.heartbeat(&id);
            }
            if self.groups.members(&self.group_id) == before {
                return true;
            }
        }
        false
    }

    /// The coordinator's view of the members.
    pub fn view(&self) -> Vec<MemberView> {
        self.groups.members(&self.group_id)
    }
}

/// One step of [`kafka_21401`]: its label and the coordinator's members after it.
#[derive(Debug, Clone)]
pub struct Step {
    /// The seed's step label.
    pub label: &'static str,
    /// The members after the step.
    pub members: Vec<MemberView>,
}

/// The outcome of [`kafka_21401`].
#[derive(Debug, Clone)]
pub struct Kafka21401 {
    /// The members after each step of the seed.
    pub steps: Vec<Step>,
    /// The answer to A3's join at step 8.
    pub a3_answer: StreamsGroupHeartbeatResponse,
    /// The script, to continue from step 8.
    pub script: Script,
}

/// Member ids of [`kafka_21401`]: A1 and A2 before and after their rejoin, B, A3. The member
/// ids are chosen so that the assignor's tie at step 4 (both A1 and A2 hold standby 0_2 on
/// Pnew; the first candidate in member order keeps it) falls to A2, as in the seed.
pub mod ids {
    /// A1 on Pold.
    pub const A1: &str = "m1-a1";
    /// A2 on Pold.
    pub const A2: &str = "m2-a2";
    /// B on Q.
    pub const B: &str = "m3-b";
    /// A1 rejoined on Pnew.
    pub const A1_NEW: &str = "m5-a1";
    /// A2 rejoined on Pnew (orders before A1's new id).
    pub const A2_NEW: &str = "m4-a2";
    /// A3 on Pnew.
    pub const A3: &str = "m6-a3";
    /// A helper member on Q that leaves before step 1.
    pub const C: &str = "m0-c";
}

/// KAFKA-21401's steps 1-8 with `index`: three stateful tasks 0_0, 0_1, 0_2 (a 3-partition
/// source topic and a changelog), two standby replicas, static members A1 and A2 on process
/// Pold, B on Q; A1 and A2 leave with -2 and rejoin on Pnew with new member ids; A1 revokes
/// its standbys; B leaves with -1; A3 joins on Pnew. Requests are one second apart from `start`.
pub fn kafka_21401(index: OwnershipIndex, start: Instant) -> Kafka21401 {
    use ids::*;
    let config = StreamsGroupSettings {
        num_standby_replicas: 2,
        ownership_index: index,
        ..StreamsGroupSettings::default()
    };
    let topics = BTreeMap::from([("input".to_owned(), 3), ("store-changelog".to_owned(), 3)]);
    let mut sc = Script::new(config, topics, one_stateful_subtopology(), start);
    let mut steps = Vec::new();
    // 1. The initial state, built by joins: a helper member C on Q, then B, A2 and A1, then C
    // leaves (the shortest join/leave sequence found that ends in the seed's step 1).
    for (id, inst, process) in [
        (C, None, "Q"),
        (B, None, "Q"),
        (A2, Some("A2"), "Pold"),
        (A1, Some("A1"), "Pold"),
    ] {
        sc.join(id, inst, process);
        sc.settle(10);
    }
    sc.leave(C, -1);
    sc.settle(10);
    steps.push(Step {
        label: "1. Initial state",
        members: sc.view(),
    });
    // 2. A1 and A2 leave temporarily.
    sc.leave(A1, -2);
    sc.leave(A2, -2);
    steps.push(Step {
        label: "2. A1 and A2 temporarily leave",
        members: sc.view(),
    });
    // 3. A1 rejoins first on Pnew.
    sc.join(A1_NEW, Some("A1"), "Pnew");
    steps.push(Step {
        label: "3. A1 rejoins first on Pnew",
        members: sc.view(),
    });
    // 4. A2 rejoins on Pnew.
    sc.join(A2_NEW, Some("A2"), "Pnew");
    steps.push(Step {
        label: "4. A2 also rejoins on Pnew",
        members: sc.view(),
    });
    // 5. A1 is told to revoke its standbys.
    sc.heartbeat(A1_NEW);
    steps.push(Step {
        label: "5. A1 is instructed to revoke its standby tasks",
        members: sc.view(),
    });
    // 6. A1 acknowledges.
    sc.heartbeat(A1_NEW);
    steps.push(Step {
        label: "6. A1 acknowledges completed revocation",
        members: sc.view(),
    });
    // 7. B leaves for good.
    sc.leave(B, -1);
    steps.push(Step {
        label: "7. B permanently leaves",
        members: sc.view(),
    });
    // 8. A3 joins on Pnew.
    let a3_answer = sc.join(A3, None, "Pnew");
    steps.push(Step {
        label: "8. A new member A3 joins Pnew",
        members: sc.view(),
    });
    Kafka21401 {
        steps,
        a3_answer,
        script: sc,
    }
}
