//! The crate's own names for what a streams member talks about: its topology (what an epoch-0
//! heartbeat declares), tasks and their roles, the user endpoint, and the statuses and endpoint
//! map the coordinator answers with. Converted to and from the wire types of
//! [`crate::messages`] here and nowhere else.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;

use crate::error::ConfigError;
use crate::machine::TopicPartition;
use crate::messages::streams_group_describe_response as desc;
use crate::messages::streams_group_heartbeat_request as req;
use crate::messages::streams_group_heartbeat_response as resp;
use crate::messages::streams_group_topology_description_update_request as upd;

/// A task: one partition of one subtopology (Kafka Streams' `TaskId`, printed `0_2`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId {
    /// The subtopology id, as the topology names it.
    pub subtopology: String,
    /// The partition.
    pub partition: i32,
}

impl TaskId {
    /// Task `partition` of `subtopology`.
    pub fn new(subtopology: impl Into<String>, partition: i32) -> Self {
        Self {
            subtopology: subtopology.into(),
            partition,
        }
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.subtopology, self.partition)
    }
}

/// The role a member holds a task in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum TaskRole {
    /// Processes the task's input and owns its state.
    Active,
    /// Keeps a replica of the task's state.
    Standby,
    /// A standby catching up before the task moves here.
    Warmup,
}

impl fmt::Display for TaskRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            TaskRole::Active => "active",
            TaskRole::Standby => "standby",
            TaskRole::Warmup => "warm-up",
        })
    }
}

/// Tasks by role.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamsTasks {
    /// Active tasks.
    pub active: BTreeSet<TaskId>,
    /// Standby tasks.
    pub standby: BTreeSet<TaskId>,
    /// Warm-up tasks.
    pub warmup: BTreeSet<TaskId>,
}

impl StreamsTasks {
    /// No task at all.
    pub fn is_empty(&self) -> bool {
        self.active.is_empty() && self.standby.is_empty() && self.warmup.is_empty()
    }

    /// The tasks of `role`.
    pub fn of(&self, role: TaskRole) -> &BTreeSet<TaskId> {
        match role {
            TaskRole::Active => &self.active,
            TaskRole::Standby => &self.standby,
            TaskRole::Warmup => &self.warmup,
        }
    }

    pub(crate) fn of_mut(&mut self, role: TaskRole) -> &mut BTreeSet<TaskId> {
        match role {
            TaskRole::Active => &mut self.active,
            TaskRole::Standby => &mut self.standby,
            TaskRole::Warmup => &mut self.warmup,
        }
    }

    /// The role `task` is held in, if any (active first).
    pub fn role_of(&self, task: &TaskId) -> Option<TaskRole> {
        ROLES.into_iter().find(|r| self.of(*r).contains(task))
    }

    /// Every (task, role) pair.
    pub fn iter(&self) -> impl Iterator<Item = (&TaskId, TaskRole)> {
        ROLES
            .into_iter()
            .flat_map(move |r| self.of(r).iter().map(move |t| (t, r)))
    }

    /// One role per task: a task listed as active is not also a standby or warm-up, a standby
    /// not also a warm-up (an answer that lists one task twice names its promotion).
    pub(crate) fn normalized(mut self) -> Self {
        let Self {
            active,
            standby,
            warmup,
        } = &mut self;
        standby.retain(|t| !active.contains(t));
        warmup.retain(|t| !active.contains(t) && !standby.contains(t));
        self
    }
}

/// Tasks the coordinator assigned of subtopologies the member's topology does not have: their
/// partitions by role and subtopology id. The member cannot run them (a task's input partitions
/// are resolved through its own topology), so it never takes them; see
/// [`StreamsEvent::TasksRefused`](super::StreamsEvent::TasksRefused).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RefusedTasks {
    /// Active tasks: partitions by subtopology id.
    pub active: BTreeMap<String, BTreeSet<i32>>,
    /// Standby tasks: partitions by subtopology id.
    pub standby: BTreeMap<String, BTreeSet<i32>>,
    /// Warm-up tasks: partitions by subtopology id.
    pub warmup: BTreeMap<String, BTreeSet<i32>>,
}

impl RefusedTasks {
    /// No task at all.
    pub fn is_empty(&self) -> bool {
        self.active.is_empty() && self.standby.is_empty() && self.warmup.is_empty()
    }

    /// The tasks of `role`: partitions by subtopology id.
    pub fn of(&self, role: TaskRole) -> &BTreeMap<String, BTreeSet<i32>> {
        match role {
            TaskRole::Active => &self.active,
            TaskRole::Standby => &self.standby,
            TaskRole::Warmup => &self.warmup,
        }
    }

    fn of_mut(&mut self, role: TaskRole) -> &mut BTreeMap<String, BTreeSet<i32>> {
        match role {
            TaskRole::Active => &mut self.active,
            TaskRole::Standby => &mut self.standby,
            TaskRole::Warmup => &mut self.warmup,
        }
    }

    /// The unknown subtopology ids, in any role.
    pub fn subtopologies(&self) -> BTreeSet<&str> {
        ROLES
            .into_iter()
            .flat_map(|r| self.of(r).keys().map(String::as_str))
            .collect()
    }
}

/// The three roles, in the order they are handed out and reported.
pub(crate) const ROLES: [TaskRole; 3] = [TaskRole::Active, TaskRole::Standby, TaskRole::Warmup];

/// Where a process serves Interactive Queries (`application.server`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UserEndpoint {
    /// Host.
    pub host: String,
    /// Port.
    pub port: u16,
}

impl UserEndpoint {
    /// `host`:`port`.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        Self {
            host: host.into(),
            port,
        }
    }
}

impl fmt::Display for UserEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// An internal topic the group coordinator creates (a state changelog or a repartition topic).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InternalTopic {
    /// Topic name.
    pub name: String,
    /// Partition count to enforce (repartition topics only; changelog topics follow their
    /// subtopology's source partitions). `None`: the coordinator decides.
    pub partitions: Option<i32>,
    /// Replication factor; `None`: the broker default (-1 on the wire, what Kafka Streams
    /// sends with its `replication.factor` default).
    pub replication_factor: Option<i16>,
    /// Topic configs.
    pub configs: BTreeMap<String, String>,
}

/// The configs Kafka Streams 4.4 gives every internal topic (`InternalTopicConfig
/// .INTERNAL_TOPIC_DEFAULT_OVERRIDES`).
const INTERNAL_DEFAULTS: [(&str, &str); 1] = [("message.timestamp.type", "CreateTime")];

impl InternalTopic {
    /// A topic named `name` with every setting left to the coordinator and no configs. A group
    /// that Kafka Streams created refuses a topology that differs from its own: for the topics
    /// Kafka Streams declares, use [`changelog`](Self::changelog) and
    /// [`repartition`](Self::repartition).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }

    /// The changelog topic of a key-value store (not windowed, not versioned) as Kafka Streams
    /// 4.4 declares it (`UnwindowedUnversionedChangelogTopicConfig`): `cleanup.policy=compact`,
    /// `message.timestamp.type=CreateTime`, the partition count and replication factor left to
    /// the broker. Kafka Streams names it `<application.id>-<store name>-changelog`.
    pub fn changelog(name: impl Into<String>) -> Self {
        Self::with_configs(name, &[("cleanup.policy", "compact")])
    }

    /// A repartition topic as Kafka Streams 4.4 declares it (`RepartitionTopicConfig`):
    /// `cleanup.policy=delete`, `retention.ms=-1`, `segment.bytes=52428800`,
    /// `message.timestamp.type=CreateTime`, the partition count and replication factor left to
    /// the broker. Kafka Streams names it `<application.id>-<name>-repartition`.
    pub fn repartition(name: impl Into<String>) -> Self {
        Self::with_configs(
            name,
            &[
                ("cleanup.policy", "delete"),
                ("retention.ms", "-1"),
                ("segment.bytes", "52428800"),
            ],
        )
    }

    fn with_configs(name: impl Into<String>, configs: &[(&str, &str)]) -> Self {
        let configs = (INTERNAL_DEFAULTS.iter().chain(configs))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Self {
            configs,
            ..Self::new(name)
        }
    }
}

/// One subtopology: the unit tasks are cut from (one task per input partition).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Subtopology {
    /// Its id, unique within the topology (`"0"`, `"1"`, ...).
    pub id: String,
    /// Source topics by name.
    pub source_topics: BTreeSet<String>,
    /// Source topics by pattern (RE2/J).
    pub source_topic_regex: Vec<String>,
    /// Repartition topics it writes to.
    pub repartition_sink_topics: BTreeSet<String>,
    /// Its state stores' changelog topics.
    pub state_changelog_topics: Vec<InternalTopic>,
    /// Repartition topics it reads from.
    pub repartition_source_topics: Vec<InternalTopic>,
    /// Groups of source or repartition-source topics (by name) that must be copartitioned.
    pub copartition_groups: Vec<BTreeSet<String>>,
}

impl Subtopology {
    /// Subtopology `id` reading `source_topics`.
    pub fn new<I, S>(id: impl Into<String>, source_topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            id: id.into(),
            source_topics: source_topics.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// The same subtopology with a state changelog topic.
    #[must_use]
    pub fn with_changelog(mut self, topic: InternalTopic) -> Self {
        self.state_changelog_topics.push(topic);
        self
    }

    /// The same subtopology reading a repartition topic.
    #[must_use]
    pub fn with_repartition_source(mut self, topic: InternalTopic) -> Self {
        self.repartition_source_topics.push(topic);
        self
    }
}

/// What an epoch-0 heartbeat declares: the application's topology and its epoch (all members
/// of a group must declare the same topology at the same epoch).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamsTopology {
    /// The topology epoch.
    pub epoch: i32,
    /// The subtopologies.
    pub subtopologies: Vec<Subtopology>,
}

impl StreamsTopology {
    /// A topology at `epoch`.
    pub fn new(epoch: i32, subtopologies: Vec<Subtopology>) -> Self {
        Self {
            epoch,
            subtopologies,
        }
    }

    /// Checks what the wire form needs: at least one subtopology, unique non-empty ids, every
    /// subtopology reading something, copartitioned topics among its source topics, at most
    /// `i16::MAX` topics per list (the copartition groups index them with `int16`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |rule: String| {
            Err(ConfigError {
                key: "topology",
                rule,
            })
        };
        if self.subtopologies.is_empty() {
            return bad("needs at least one subtopology".into());
        }
        let mut ids = BTreeSet::new();
        for s in &self.subtopologies {
            if s.id.is_empty() || !ids.insert(s.id.as_str()) {
                return bad(format!(
                    "subtopology ids must be unique and non-empty: {:?}",
                    s.id
                ));
            }
            if s.source_topics.is_empty()
                && s.source_topic_regex.is_empty()
                && s.repartition_source_topics.is_empty()
            {
                return bad(format!("subtopology {} reads no topic", s.id));
            }
            let limit = i16::MAX as usize;
            if s.source_topics.len() > limit || s.repartition_source_topics.len() > limit {
                return bad(format!("subtopology {} has too many source topics", s.id));
            }
            for group in &s.copartition_groups {
                for t in group {
                    let known = s.source_topics.contains(t)
                        || s.repartition_source_topics.iter().any(|r| &r.name == t);
                    if !known {
                        return bad(format!(
                            "copartitioned topic {t:?} is not a source topic of subtopology {}",
                            s.id
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// The subtopology `id`.
    pub fn subtopology(&self, id: &str) -> Option<&Subtopology> {
        self.subtopologies.iter().find(|s| s.id == id)
    }

    /// The input partitions of `task`, whose offsets its active owner commits: partition
    /// `task.partition` of each source and repartition-source topic of its subtopology (a
    /// Kafka Streams task reads that partition of each; StreamsPartitionAssignor / the broker's
    /// TopicsImage-based task count give every source topic of a subtopology the same number of
    /// partitions). Topics a source pattern matches are not known to the member and not listed.
    /// Empty for a subtopology the topology does not have.
    pub fn input_partitions(&self, task: &TaskId) -> Vec<TopicPartition> {
        let Some(s) = self.subtopology(&task.subtopology) else {
            return Vec::new();
        };
        let topics = (s.source_topics.iter().map(String::as_str))
            .chain(s.repartition_source_topics.iter().map(|t| t.name.as_str()));
        topics
            .map(|t| TopicPartition::new(t, task.partition))
            .collect()
    }

    /// The wire form, sorted as the Java client sorts it
    /// (StreamsGroupHeartbeatRequestManager.HeartbeatState): subtopologies by id, topics and
    /// configs by name; copartition groups index the sorted source and repartition-source lists.
    /// Call [`validate`](Self::validate) first: an unknown copartitioned topic is skipped here.
    pub(crate) fn to_wire(&self) -> req::Topology {
        let mut subs: Vec<&Subtopology> = self.subtopologies.iter().collect();
        subs.sort_by(|a, b| a.id.cmp(&b.id));
        let subtopologies = subs
            .into_iter()
            .map(|s| {
                let sources: Vec<&String> = s.source_topics.iter().collect();
                let mut repartition: Vec<&InternalTopic> =
                    s.repartition_source_topics.iter().collect();
                repartition.sort_by(|a, b| a.name.cmp(&b.name));
                let mut changelogs: Vec<&InternalTopic> = s.state_changelog_topics.iter().collect();
                changelogs.sort_by(|a, b| a.name.cmp(&b.name));
                let copartition_groups = s
                    .copartition_groups
                    .iter()
                    .map(|group| {
                        let index = |list: Vec<&str>, t: &str| {
                            list.iter().position(|x| *x == t).map(|i| i as i16)
                        };
                        let names: Vec<&str> = sources.iter().map(|x| x.as_str()).collect();
                        let rnames: Vec<&str> =
                            repartition.iter().map(|x| x.name.as_str()).collect();
                        req::CopartitionGroup::default()
                            .with_source_topics(
                                group
                                    .iter()
                                    .filter_map(|t| index(names.clone(), t))
                                    .collect(),
                            )
                            .with_repartition_source_topics(
                                group
                                    .iter()
                                    .filter(|t| !s.source_topics.contains(*t))
                                    .filter_map(|t| index(rnames.clone(), t))
                                    .collect(),
                            )
                    })
                    .collect();
                req::Subtopology::default()
                    .with_subtopology_id(str_bytes(&s.id))
                    .with_source_topics(sources.iter().map(|t| topic_name(t)).collect())
                    .with_source_topic_regex(
                        s.source_topic_regex.iter().map(|r| str_bytes(r)).collect(),
                    )
                    .with_repartition_sink_topics(
                        s.repartition_sink_topics
                            .iter()
                            .map(|t| topic_name(t))
                            .collect(),
                    )
                    .with_state_changelog_topics(
                        // A changelog topic's partition count follows its subtopology: always 0.
                        changelogs
                            .into_iter()
                            .map(|t| topic_info(t, false))
                            .collect(),
                    )
                    .with_repartition_source_topics(
                        repartition
                            .into_iter()
                            .map(|t| topic_info(t, true))
                            .collect(),
                    )
                    .with_copartition_groups(copartition_groups)
            })
            .collect();
        req::Topology::default()
            .with_epoch(self.epoch)
            .with_subtopologies(subtopologies)
    }
}

fn topic_info(t: &InternalTopic, with_partitions: bool) -> req::TopicInfo {
    req::TopicInfo::default()
        .with_name(topic_name(&t.name))
        .with_partitions(if with_partitions {
            t.partitions.unwrap_or(0)
        } else {
            0
        })
        .with_replication_factor(t.replication_factor.unwrap_or(-1))
        .with_topic_configs(
            t.configs
                .iter()
                .map(|(k, v)| {
                    req::KeyValue::default()
                        .with_key(str_bytes(k))
                        .with_value(str_bytes(v))
                })
                .collect(),
        )
}

pub(crate) fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn topic_name(s: &str) -> TopicName {
    TopicName(str_bytes(s))
}

/// Tasks of one role on the wire, grouped by subtopology and sorted.
pub(crate) fn tasks_to_wire(tasks: &BTreeSet<TaskId>) -> Vec<req::TaskIds> {
    let mut by_sub: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for t in tasks {
        by_sub.entry(&t.subtopology).or_default().push(t.partition);
    }
    by_sub
        .into_iter()
        .map(|(s, ps)| {
            req::TaskIds::default()
                .with_subtopology_id(str_bytes(s))
                .with_partitions(ps)
        })
        .collect()
}

/// An answer's three task lists (active, standby, warm-up), split into the tasks of the
/// subtopologies `topology` has and the partitions of those it lacks; negative partitions are
/// dropped. Each entry's subtopology id is looked up before a task is made of each partition,
/// so an unknown id is copied once per role, however many partitions name it.
pub(crate) fn tasks_from_wire(
    lists: [&[resp::TaskIds]; 3],
    topology: &StreamsTopology,
) -> (StreamsTasks, RefusedTasks) {
    let mut known = StreamsTasks::default();
    let mut refused = RefusedTasks::default();
    for (role, list) in ROLES.into_iter().zip(lists) {
        for entry in list {
            let partitions = entry.partitions.iter().copied().filter(|p| *p >= 0);
            let id = entry.subtopology_id.as_str();
            if topology.subtopology(id).is_some() {
                known
                    .of_mut(role)
                    .extend(partitions.map(|p| TaskId::new(id, p)));
            } else {
                let mut partitions = partitions.peekable();
                if partitions.peek().is_none() {
                    continue;
                }
                let of_role = refused.of_mut(role);
                match of_role.get_mut(id) {
                    Some(set) => set.extend(partitions),
                    None => {
                        of_role.insert(id.to_owned(), partitions.collect());
                    }
                }
            }
        }
    }
    (known, refused)
}

/// Task offsets on the wire, sorted by task.
pub(crate) fn offsets_to_wire(offsets: &BTreeMap<TaskId, i64>) -> Vec<req::TaskOffset> {
    offsets
        .iter()
        .map(|(t, o)| {
            req::TaskOffset::default()
                .with_subtopology_id(str_bytes(&t.subtopology))
                .with_partition(t.partition)
                .with_offset(*o)
        })
        .collect()
}

/// A status the coordinator reports for the member's group (StreamsGroupHeartbeatResponse.json,
/// `Status.StatusCode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum StatusCode {
    /// 0: the topology epoch supplied is lower than the group's.
    StaleTopology,
    /// 1: source topics are missing (or a source regex matches none).
    MissingSourceTopics,
    /// 2: topics are not copartitioned as required, or a changelog's partition count is wrong.
    IncorrectlyPartitionedTopics,
    /// 3: internal topics are missing (the coordinator tries to create them).
    MissingInternalTopics,
    /// 4: a client asked the whole application to shut down.
    ShutdownApplication,
    /// 5: no assignment yet: its computation was delayed.
    AssignmentDelayed,
    /// 6: client tags required by rack-aware standby assignment are missing.
    MissingClientTags,
    /// A code this crate does not know.
    Unknown(i8),
}

impl StatusCode {
    /// The code's meaning.
    pub fn from_code(code: i8) -> Self {
        match code {
            0 => StatusCode::StaleTopology,
            1 => StatusCode::MissingSourceTopics,
            2 => StatusCode::IncorrectlyPartitionedTopics,
            3 => StatusCode::MissingInternalTopics,
            4 => StatusCode::ShutdownApplication,
            5 => StatusCode::AssignmentDelayed,
            6 => StatusCode::MissingClientTags,
            c => StatusCode::Unknown(c),
        }
    }
}

/// One status of an answer, with the coordinator's detail text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamsStatus {
    /// What it is.
    pub code: StatusCode,
    /// The coordinator's detail (e.g. the missing topics).
    pub detail: String,
}

pub(crate) fn statuses_from_wire(statuses: &[resp::Status]) -> Vec<StreamsStatus> {
    let mut v: Vec<StreamsStatus> = statuses
        .iter()
        .map(|s| StreamsStatus {
            code: StatusCode::from_code(s.status_code),
            detail: s.status_detail.to_string(),
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The partitions one endpoint serves, for Interactive Queries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EndpointPartitions {
    /// Source partitions of the active tasks there.
    pub active: BTreeSet<TopicPartition>,
    /// Source partitions of the standby and warm-up tasks there.
    pub standby: BTreeSet<TopicPartition>,
}

/// The endpoints-to-partitions map of an answer; entries of one endpoint (one per member of a
/// process) are merged, as the schema asks.
pub(crate) fn endpoints_from_wire(
    entries: &[resp::EndpointToPartitions],
) -> BTreeMap<UserEndpoint, EndpointPartitions> {
    let mut map: BTreeMap<UserEndpoint, EndpointPartitions> = BTreeMap::new();
    let parts = |tps: &[resp::TopicPartition]| -> Vec<TopicPartition> {
        tps.iter()
            .flat_map(|t| {
                // One name shared by the partitions of the entry.
                let name: Arc<str> = Arc::from(t.topic.0.as_str());
                t.partitions
                    .iter()
                    .map(move |p| TopicPartition::new(&name, *p))
            })
            .collect()
    };
    for e in entries {
        let endpoint = UserEndpoint::new(e.user_endpoint.host.to_string(), e.user_endpoint.port);
        let slot = map.entry(endpoint).or_default();
        slot.active.extend(parts(&e.active_partitions));
        slot.standby.extend(parts(&e.standby_partitions));
    }
    map
}

// ------------------------------------------------------------------ topology description

/// A node of a [`TopologyDescription`], by kind: what Kafka Streams' `TopologyDescription`
/// says of it (KIP-1331: `TopologyDescriptionNode.NodeType` 1, 2, 3). The broker keeps only
/// these fields of each kind (StreamsGroupTopologyDescriptionConverter.convertNode).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeKind {
    /// A source node (1): the topics it reads (empty when a pattern decides them).
    Source {
        /// The source topics.
        topics: Vec<String>,
    },
    /// A processor node (2): the state stores it accesses.
    Processor {
        /// The state store names.
        stores: Vec<String>,
    },
    /// A sink node (3): the topic it writes to (`None` when chosen per record).
    Sink {
        /// The sink topic.
        topic: Option<String>,
    },
}

/// The wire codes of the node kinds.
const NODE_SOURCE: i8 = 1;
const NODE_PROCESSOR: i8 = 2;
const NODE_SINK: i8 = 3;

/// A processing node of a [`TopologyDescription`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeDescription {
    /// The node's name (`KSTREAM-SOURCE-0000000000`).
    pub name: String,
    /// Its kind, with what that kind carries.
    pub kind: NodeKind,
    /// The names of the nodes it forwards to (the predecessors follow from these).
    pub successors: Vec<String>,
}

impl NodeDescription {
    /// A source node `name` reading `topics`.
    pub fn source<I, S>(name: impl Into<String>, topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::of(
            name,
            NodeKind::Source {
                topics: topics.into_iter().map(Into::into).collect(),
            },
        )
    }

    /// A processor node `name` accessing `stores`.
    pub fn processor<I, S>(name: impl Into<String>, stores: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::of(
            name,
            NodeKind::Processor {
                stores: stores.into_iter().map(Into::into).collect(),
            },
        )
    }

    /// A sink node `name` writing to `topic`.
    pub fn sink(name: impl Into<String>, topic: Option<&str>) -> Self {
        Self::of(
            name,
            NodeKind::Sink {
                topic: topic.map(str::to_owned),
            },
        )
    }

    fn of(name: impl Into<String>, kind: NodeKind) -> Self {
        Self {
            name: name.into(),
            kind,
            successors: Vec::new(),
        }
    }

    /// The same node forwarding to `successors`.
    #[must_use]
    pub fn with_successors<I, S>(mut self, successors: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.successors = successors.into_iter().map(Into::into).collect();
        self
    }

    fn to_wire(&self) -> upd::TopologyDescriptionNode {
        let strs = |v: &[String]| v.iter().map(|s| str_bytes(s)).collect::<Vec<_>>();
        let topics = |v: &[String]| {
            v.iter()
                .map(|s| TopicName(str_bytes(s)))
                .collect::<Vec<_>>()
        };
        let node = upd::TopologyDescriptionNode::default()
            .with_name(str_bytes(&self.name))
            .with_successors(strs(&self.successors));
        match &self.kind {
            NodeKind::Source { topics: t } => node
                .with_node_type(NODE_SOURCE)
                .with_source_topics(topics(t)),
            NodeKind::Processor { stores } => node
                .with_node_type(NODE_PROCESSOR)
                .with_stores(strs(stores)),
            NodeKind::Sink { topic } => node
                .with_node_type(NODE_SINK)
                .with_sink_topic(topic.as_deref().map(|t| TopicName(str_bytes(t)))),
        }
    }

    fn from_describe(n: &desc::TopologyDescriptionNode) -> Option<Self> {
        let strs = |v: &[StrBytes]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let kind = match n.node_type {
            NODE_SOURCE => NodeKind::Source {
                topics: n.source_topics.iter().map(|t| t.0.to_string()).collect(),
            },
            NODE_PROCESSOR => NodeKind::Processor {
                stores: strs(&n.stores),
            },
            NODE_SINK => NodeKind::Sink {
                topic: n.sink_topic.as_ref().map(|t| t.0.to_string()),
            },
            _ => return None,
        };
        Some(Self {
            name: n.name.to_string(),
            kind,
            successors: strs(&n.successors),
        })
    }
}

/// A subtopology of a [`TopologyDescription`]: its id and its nodes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SubtopologyDescription {
    /// The subtopology id (as [`Subtopology::id`]).
    pub id: String,
    /// Its processing nodes.
    pub nodes: Vec<NodeDescription>,
}

impl SubtopologyDescription {
    /// Subtopology `id` made of `nodes`.
    pub fn new(id: impl Into<String>, nodes: Vec<NodeDescription>) -> Self {
        Self {
            id: id.into(),
            nodes,
        }
    }
}

/// A global state store of a [`TopologyDescription`]: the source node that feeds it and the
/// processor node that fills it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GlobalStoreDescription {
    /// The source node ([`NodeKind::Source`]).
    pub source: NodeDescription,
    /// The processor node ([`NodeKind::Processor`]).
    pub processor: NodeDescription,
}

/// The human-readable description of an application's processing topology that a streams
/// member pushes to the group coordinator when the coordinator asks for it (KIP-1331,
/// Kafka 4.4): what Kafka Streams' `Topology#describe()` returns, subtopologies with their
/// source, processor and sink nodes, and global stores. A broker with a topology description
/// plugin (`group.streams.topology.description.plugin.class`) stores it and serves it through
/// StreamsGroupDescribe v1 (`includeTopologyDescription`); the coordinator does not check it
/// against the topology the members declare.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct TopologyDescription {
    /// The subtopologies.
    pub subtopologies: Vec<SubtopologyDescription>,
    /// The global stores.
    pub global_stores: Vec<GlobalStoreDescription>,
}

impl TopologyDescription {
    /// A description of `subtopologies` without global stores.
    pub fn new(subtopologies: Vec<SubtopologyDescription>) -> Self {
        Self {
            subtopologies,
            global_stores: Vec::new(),
        }
    }

    /// The same description with a global store fed by `source` and filled by `processor`.
    #[must_use]
    pub fn with_global_store(
        mut self,
        source: NodeDescription,
        processor: NodeDescription,
    ) -> Self {
        self.global_stores
            .push(GlobalStoreDescription { source, processor });
        self
    }

    /// Checks what the broker would refuse (INVALID_REQUEST from
    /// StreamsGroupTopologyDescriptionConverter): a global store whose source is not a
    /// [`NodeKind::Source`] or whose processor is not a [`NodeKind::Processor`]; and unique,
    /// non-empty subtopology ids and node names within a subtopology.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |rule: String| {
            Err(ConfigError {
                key: "topology_description",
                rule,
            })
        };
        let mut ids = BTreeSet::new();
        for s in &self.subtopologies {
            if s.id.is_empty() || !ids.insert(s.id.as_str()) {
                return bad(format!(
                    "subtopology ids must be unique and non-empty: {:?}",
                    s.id
                ));
            }
            let mut names = BTreeSet::new();
            for n in &s.nodes {
                if n.name.is_empty() || !names.insert(n.name.as_str()) {
                    return bad(format!(
                        "node names must be unique and non-empty within subtopology {}: {:?}",
                        s.id, n.name
                    ));
                }
            }
        }
        for g in &self.global_stores {
            let kinds = (&g.source.kind, &g.processor.kind);
            if !matches!(kinds, (NodeKind::Source { .. }, NodeKind::Processor { .. })) {
                return bad(format!(
                    "a global store is a source and a processor node: {:?} / {:?}",
                    g.source.name, g.processor.name
                ));
            }
        }
        Ok(())
    }

    /// The wire form of the push (StreamsGroupTopologyDescriptionUpdate), in the order given.
    pub(crate) fn to_wire(&self) -> upd::TopologyDescription {
        upd::TopologyDescription::default()
            .with_subtopologies(
                self.subtopologies
                    .iter()
                    .map(|s| {
                        upd::TopologyDescriptionSubtopology::default()
                            .with_subtopology_id(str_bytes(&s.id))
                            .with_nodes(s.nodes.iter().map(NodeDescription::to_wire).collect())
                    })
                    .collect(),
            )
            .with_global_stores(
                self.global_stores
                    .iter()
                    .map(|g| {
                        upd::TopologyDescriptionGlobalStore::default()
                            .with_source(g.source.to_wire())
                            .with_processor(g.processor.to_wire())
                    })
                    .collect(),
            )
    }

    /// The description a StreamsGroupDescribe v1 answer carries (status AVAILABLE); `None` when
    /// a node has a kind this crate does not know.
    pub fn from_describe(d: &desc::TopologyDescription) -> Option<Self> {
        let subtopologies = d
            .subtopologies
            .iter()
            .map(|s| {
                Some(SubtopologyDescription {
                    id: s.subtopology_id.to_string(),
                    nodes: (s.nodes.iter().map(NodeDescription::from_describe))
                        .collect::<Option<_>>()?,
                })
            })
            .collect::<Option<_>>()?;
        let global_stores = d
            .global_stores
            .iter()
            .map(|g| {
                Some(GlobalStoreDescription {
                    source: NodeDescription::from_describe(&g.source)?,
                    processor: NodeDescription::from_describe(&g.processor)?,
                })
            })
            .collect::<Option<_>>()?;
        Some(Self {
            subtopologies,
            global_stores,
        })
    }
}

/// What a StreamsGroupDescribe v1 answer says of a group's topology description
/// (`TopologyDescriptionStatus`, KIP-1331).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DescriptionStatus {
    /// 0: not asked for (`IncludeTopologyDescription` false, or a v0 answer).
    NotRequested,
    /// 1: none stored (no plugin on the broker, or no member pushed one yet).
    NotStored,
    /// 2: the broker failed to read it from its plugin.
    Error,
    /// 3: the answer carries it.
    Available,
    /// A code this crate does not know.
    Unknown(i8),
}

impl DescriptionStatus {
    /// The status of wire code `code`.
    pub fn from_code(code: i8) -> Self {
        match code {
            0 => Self::NotRequested,
            1 => Self::NotStored,
            2 => Self::Error,
            3 => Self::Available,
            other => Self::Unknown(other),
        }
    }
}
