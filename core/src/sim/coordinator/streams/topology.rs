//! The group's topology (`streams/StreamsTopology.java`) and its configuration against the
//! topics that exist (`streams/topics/InternalTopicManager.configureTopics`,
//! `RepartitionTopics`, `CopartitionedTopicsEnforcer`, `ChangelogTopics`).

use std::collections::{BTreeMap, BTreeSet};

use crate::messages::streams_group_heartbeat_request as req;
use crate::sim::codes::UNKNOWN_SERVER_ERROR;

use super::{HbError, STREAMS_INVALID_TOPOLOGY};

/// `StreamsGroupHeartbeatResponse.Status.MISSING_SOURCE_TOPICS`.
pub(crate) const MISSING_SOURCE_TOPICS: i8 = 1;
/// `Status.INCORRECTLY_PARTITIONED_TOPICS`.
pub(crate) const INCORRECTLY_PARTITIONED_TOPICS: i8 = 2;
/// `Status.MISSING_INTERNAL_TOPICS`.
pub(crate) const MISSING_INTERNAL_TOPICS: i8 = 3;

/// An internal topic of the topology (`StreamsGroupTopologyValue.TopicInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TopicInfo {
    pub(crate) name: String,
    pub(crate) partitions: i32,
    pub(crate) replication_factor: i16,
    pub(crate) configs: Vec<(String, String)>,
}

/// A subtopology as the group stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Subtopology {
    pub(crate) source_topics: Vec<String>,
    pub(crate) repartition_sink_topics: Vec<String>,
    pub(crate) changelog_topics: Vec<TopicInfo>,
    pub(crate) repartition_source_topics: Vec<TopicInfo>,
    /// Copartition groups: indexes into `source_topics` and `repartition_source_topics`.
    pub(crate) copartition_groups: Vec<(Vec<i16>, Vec<i16>)>,
}

/// `StreamsTopology`: its epoch and subtopologies by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Topology {
    pub(crate) epoch: i32,
    pub(crate) subtopologies: BTreeMap<String, Subtopology>,
}

fn topic_info(t: &req::TopicInfo) -> TopicInfo {
    TopicInfo {
        name: t.name.0.to_string(),
        partitions: t.partitions,
        replication_factor: t.replication_factor,
        configs: t
            .topic_configs
            .iter()
            .map(|kv| (kv.key.to_string(), kv.value.to_string()))
            .collect(),
    }
}

impl Topology {
    /// `StreamsTopology.fromHeartbeatRequest`.
    pub(crate) fn from_request(t: &req::Topology) -> Result<Self, HbError> {
        let mut subtopologies = BTreeMap::new();
        for s in &t.subtopologies {
            let sub = Subtopology {
                source_topics: s.source_topics.iter().map(|n| n.0.to_string()).collect(),
                repartition_sink_topics: s
                    .repartition_sink_topics
                    .iter()
                    .map(|n| n.0.to_string())
                    .collect(),
                changelog_topics: s.state_changelog_topics.iter().map(topic_info).collect(),
                repartition_source_topics: s
                    .repartition_source_topics
                    .iter()
                    .map(topic_info)
                    .collect(),
                copartition_groups: s
                    .copartition_groups
                    .iter()
                    .map(|g| (g.source_topics.clone(), g.repartition_source_topics.clone()))
                    .collect(),
            };
            // `Collectors.toMap` refuses a duplicate key (IllegalStateException).
            if subtopologies
                .insert(s.subtopology_id.to_string(), sub)
                .is_some()
            {
                return Err(HbError::new(
                    UNKNOWN_SERVER_ERROR,
                    format!("Duplicate subtopology id {}.", s.subtopology_id.as_str()),
                ));
            }
        }
        Ok(Self {
            epoch: t.epoch,
            subtopologies,
        })
    }

    /// `StreamsTopology.requiredTopics`: source, repartition source and changelog topics.
    pub(crate) fn required_topics(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for s in self.subtopologies.values() {
            out.extend(s.source_topics.iter().cloned());
            out.extend(s.repartition_source_topics.iter().map(|t| t.name.clone()));
            out.extend(s.changelog_topics.iter().map(|t| t.name.clone()));
        }
        out
    }
}

/// `ConfiguredSubtopology`: the subtopology with its number of tasks and its internal topics'
/// partition counts decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConfiguredSub {
    pub(crate) num_tasks: i32,
    pub(crate) source_topics: BTreeSet<String>,
    pub(crate) repartition_sink_topics: BTreeSet<String>,
    pub(crate) repartition_source_topics: BTreeMap<String, TopicInfo>,
    pub(crate) changelog_topics: BTreeMap<String, TopicInfo>,
}

impl ConfiguredSub {
    /// `TopologyMetadata.isStateful`: the subtopology has changelog topics.
    pub(crate) fn stateful(&self) -> bool {
        !self.changelog_topics.is_empty()
    }
}

/// `ConfiguredTopology`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Configured {
    pub(crate) epoch: i32,
    /// `None` when the configuration failed before the subtopologies could be configured.
    pub(crate) subtopologies: Option<BTreeMap<String, ConfiguredSub>>,
    /// `internalTopicsToBeCreated`: name -> partitions.
    pub(crate) to_create: BTreeMap<String, i32>,
    /// `topicConfigurationException`: status code and detail.
    pub(crate) error: Option<(i8, String)>,
}

impl Configured {
    /// `ConfiguredTopology.isReady`.
    pub(crate) fn is_ready(&self) -> bool {
        self.error.is_none()
    }

    /// The configured subtopologies when the topology is ready.
    pub(crate) fn ready_subtopologies(&self) -> Option<&BTreeMap<String, ConfiguredSub>> {
        if self.is_ready() {
            self.subtopologies.as_ref()
        } else {
            None
        }
    }
}

/// `InternalTopicManager.summarizeTopics`.
fn summarize<'a>(topics: impl IntoIterator<Item = &'a String>) -> String {
    let all: Vec<&String> = topics.into_iter().collect();
    if all.is_empty() {
        return "<none>".into();
    }
    let shown: Vec<&str> = all.iter().take(3).map(|s| s.as_str()).collect();
    let mut out = shown.join(", ");
    if all.len() > 3 {
        out.push_str(&format!(" and {} additional topics", all.len() - 3));
    }
    out
}

fn java_map(m: &BTreeMap<String, i32>) -> String {
    let inner: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", inner.join(", "))
}

/// A `TopicConfigurationException` (a status) or another failure (an error answer).
enum Failure {
    Status(i8, String),
    Error(HbError),
}

impl From<HbError> for Failure {
    fn from(e: HbError) -> Self {
        Failure::Error(e)
    }
}

/// `InternalTopicManager.configureTopics` against `metadata` (topic -> partitions).
///
/// Errors other than topic configuration problems (an undecidable repartition topic, a
/// copartition group of repartition topics without partition counts) fail the heartbeat.
pub(crate) fn configure(
    topology: &Topology,
    metadata: &BTreeMap<String, i32>,
) -> Result<Configured, HbError> {
    match try_configure(topology, metadata) {
        Ok(c) => Ok(c),
        Err(Failure::Status(code, detail)) => Ok(Configured {
            epoch: topology.epoch,
            subtopologies: None,
            to_create: BTreeMap::new(),
            error: Some((code, detail)),
        }),
        Err(Failure::Error(e)) => Err(e),
    }
}

fn try_configure(
    topology: &Topology,
    metadata: &BTreeMap<String, i32>,
) -> Result<Configured, Failure> {
    // `throwOnMissingSourceTopics`.
    let missing: BTreeSet<&String> = topology
        .subtopologies
        .values()
        .flat_map(|s| s.source_topics.iter())
        .filter(|t| !metadata.contains_key(*t))
        .collect();
    if !missing.is_empty() {
        return Err(Failure::Status(
            MISSING_SOURCE_TOPICS,
            format!("Source topics {} are missing.", summarize(missing)),
        ));
    }
    let mut decided = repartition_counts(topology, metadata)?;
    enforce_copartitioning(topology, metadata, &mut decided)?;
    let count = |t: &str, decided: &BTreeMap<String, i32>| -> Option<i32> {
        metadata.get(t).or_else(|| decided.get(t)).copied()
    };
    // `ChangelogTopics.setup` and `fromPersistedSubtopology`.
    let mut subs = BTreeMap::new();
    for (id, s) in &topology.subtopologies {
        let mut num_tasks = 0;
        for t in s
            .source_topics
            .iter()
            .chain(s.repartition_source_topics.iter().map(|t| &t.name))
        {
            let n = count(t, &decided).ok_or_else(|| {
                HbError::new(
                    UNKNOWN_SERVER_ERROR,
                    format!("Number of partitions must be set for topic {t}"),
                )
            })?;
            num_tasks = num_tasks.max(n);
        }
        if num_tasks == 0 && s.source_topics.is_empty() && s.repartition_source_topics.is_empty() {
            return Err(HbError::new(
                UNKNOWN_SERVER_ERROR,
                "Subtopology does not contain any source topics".into(),
            )
            .into());
        }
        let mut repartition_source_topics = BTreeMap::new();
        for t in &s.repartition_source_topics {
            let partitions = if t.partitions == 0 {
                decided.get(&t.name).copied().unwrap_or(0)
            } else {
                t.partitions
            };
            let info = TopicInfo {
                partitions,
                ..t.clone()
            };
            repartition_source_topics.insert(t.name.clone(), info);
        }
        let mut changelog_topics = BTreeMap::new();
        for t in &s.changelog_topics {
            let partitions = if t.partitions == 0 {
                num_tasks
            } else {
                t.partitions
            };
            changelog_topics.insert(
                t.name.clone(),
                TopicInfo {
                    partitions,
                    ..t.clone()
                },
            );
        }
        subs.insert(
            id.clone(),
            ConfiguredSub {
                num_tasks,
                source_topics: s.source_topics.iter().cloned().collect(),
                repartition_sink_topics: s.repartition_sink_topics.iter().cloned().collect(),
                repartition_source_topics,
                changelog_topics,
            },
        );
    }
    // `missingInternalTopics`.
    let mut to_create = BTreeMap::new();
    for s in subs.values() {
        for t in s
            .repartition_source_topics
            .values()
            .chain(s.changelog_topics.values())
        {
            to_create.insert(t.name.clone(), t.partitions);
        }
    }
    for t in topology.required_topics() {
        if let Some(&actual) = metadata.get(&t) {
            if let Some(expected) = to_create.remove(&t) {
                if expected != actual {
                    return Err(Failure::Status(
                        INCORRECTLY_PARTITIONED_TOPICS,
                        format!(
                            "Existing topic {t} has different number of partitions: expected {expected}, found {actual}"
                        ),
                    ));
                }
            }
        }
    }
    let error = (!to_create.is_empty()).then(|| {
        (
            MISSING_INTERNAL_TOPICS,
            format!(
                "Internal topics are missing: {}",
                summarize(to_create.keys())
            ),
        )
    });
    Ok(Configured {
        epoch: topology.epoch,
        subtopologies: Some(subs),
        to_create,
        error,
    })
}

/// `RepartitionTopics.setup`: fixed counts, then the maximum source partition count of the
/// subtopology writing a repartition topic, until every one is decided.
fn repartition_counts(
    topology: &Topology,
    metadata: &BTreeMap<String, i32>,
) -> Result<BTreeMap<String, i32>, Failure> {
    let mut counts: BTreeMap<String, i32> = BTreeMap::new();
    for s in topology.subtopologies.values() {
        for t in &s.repartition_source_topics {
            if t.partitions != 0 {
                counts.insert(t.name.clone(), t.partitions);
            }
        }
    }
    loop {
        let mut needed = false;
        let mut progress = false;
        for s in topology.subtopologies.values() {
            for sink in &s.repartition_sink_topics {
                if counts.contains_key(sink) {
                    continue;
                }
                // `computePartitionCount`.
                let n = s
                    .repartition_source_topics
                    .iter()
                    .filter_map(|t| counts.get(&t.name).copied())
                    .chain(
                        s.source_topics
                            .iter()
                            .filter_map(|t| metadata.get(t).copied()),
                    )
                    .max();
                match n {
                    Some(n) => {
                        counts.insert(sink.clone(), n);
                        progress = true;
                    }
                    None => needed = true,
                }
            }
        }
        if !needed {
            break;
        }
        if !progress {
            return Err(HbError::new(
                STREAMS_INVALID_TOPOLOGY,
                "Failed to compute number of partitions for all repartition topics. There may be loops in the topology that cannot be resolved.".into(),
            )
            .into());
        }
    }
    for s in topology.subtopologies.values() {
        if s.repartition_source_topics
            .iter()
            .any(|t| !counts.contains_key(&t.name))
        {
            return Err(HbError::new(
                STREAMS_INVALID_TOPOLOGY,
                "Failed to compute number of partitions for all repartition topics, because a repartition source topic is never used as a sink topic.".into(),
            )
            .into());
        }
    }
    Ok(counts)
}

/// `InternalTopicManager.enforceCopartitioning` / `CopartitionedTopicsEnforcer.enforce`.
fn enforce_copartitioning(
    topology: &Topology,
    metadata: &BTreeMap<String, i32>,
    decided: &mut BTreeMap<String, i32>,
) -> Result<(), Failure> {
    let all_repartition = topology
        .subtopologies
        .values()
        .flat_map(|s| s.repartition_source_topics.iter());
    let fixed: BTreeSet<String> = all_repartition
        .clone()
        .filter(|t| t.partitions != 0)
        .map(|t| t.name.clone())
        .collect();
    let flexible: BTreeSet<String> = all_repartition
        .filter(|t| t.partitions == 0)
        .map(|t| t.name.clone())
        .collect();
    let bad_index = || {
        Failure::Error(HbError::new(
            UNKNOWN_SERVER_ERROR,
            "Copartition group index out of range.".into(),
        ))
    };
    for s in topology.subtopologies.values() {
        for (sources, repartitions) in &s.copartition_groups {
            let mut group = BTreeSet::new();
            for &i in sources {
                let t = usize::try_from(i).ok().and_then(|i| s.source_topics.get(i));
                group.insert(t.ok_or_else(bad_index)?.clone());
            }
            for &i in repartitions {
                let t = usize::try_from(i)
                    .ok()
                    .and_then(|i| s.repartition_source_topics.get(i));
                group.insert(t.ok_or_else(bad_index)?.name.clone());
            }
            if group.is_empty() {
                continue;
            }
            let count = |t: &String| -> Result<i32, Failure> {
                metadata
                    .get(t)
                    .or_else(|| decided.get(t))
                    .copied()
                    .ok_or_else(|| {
                        Failure::Error(HbError::new(
                            UNKNOWN_SERVER_ERROR,
                            format!("Number of partitions is not set for topic: {t}"),
                        ))
                    })
            };
            let mut repartition = BTreeMap::new();
            let mut external = BTreeMap::new();
            for t in &group {
                if fixed.contains(t) || flexible.contains(t) {
                    repartition.insert(t.clone(), count(t)?);
                } else {
                    external.insert(t.clone(), count(t)?);
                }
            }
            let n = if external.is_empty() {
                if let Some(first) = fixed.iter().next() {
                    // `validateAndGetNumOfPartitions`: every fixed repartition topic of the
                    // topology must have the same count.
                    let n = count(first)?;
                    for t in &fixed {
                        if count(t)? != n {
                            return Err(Failure::Status(
                                INCORRECTLY_PARTITIONED_TOPICS,
                                format!(
                                    "Following topics do not have the same number of partitions: [{}]",
                                    java_map(&repartition)
                                ),
                            ));
                        }
                    }
                    n
                } else {
                    let n = repartition.values().copied().max().unwrap_or(0);
                    if n == 0 {
                        return Err(HbError::new(
                            STREAMS_INVALID_TOPOLOGY,
                            format!(
                                "All topics in the copartition group had undefined partition number: {:?}",
                                repartition.keys().collect::<Vec<_>>()
                            ),
                        )
                        .into());
                    }
                    n
                }
            } else {
                // `getSamePartitions`.
                let n = *external.values().next().unwrap_or(&0);
                if external.values().any(|&c| c != n) {
                    return Err(Failure::Status(
                        INCORRECTLY_PARTITIONED_TOPICS,
                        format!(
                            "Following topics do not have the same number of partitions: [{}]",
                            java_map(&external)
                        ),
                    ));
                }
                n
            };
            for (t, c) in &repartition {
                decided.insert(t.clone(), n);
                if fixed.contains(t) && *c != n {
                    return Err(Failure::Status(
                        INCORRECTLY_PARTITIONED_TOPICS,
                        format!(
                            "Number of partitions [{c}] of repartition topic [{t}] doesn't match number of partitions [{n}] of the source topic."
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}
