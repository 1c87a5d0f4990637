//! Offset rules: OffsetCommit (`OffsetMetadataManager.commitOffset` with the group's
//! `validateOffsetCommit`) and OffsetFetch (`GroupCoordinatorService.fetchOffsets`,
//! `OffsetMetadataManager.fetchOffsets` / `fetchAllOffsets` with the group's
//! `validateOffsetFetch`).
//!
//! Offsets become visible when their records commit: a commit's offsets are applied when its
//! append completes (its answer goes out then too). An OffsetFetch without RequireStable is a
//! read at the last committed offset (`scheduleReadOperation`): it sees committed offsets only.
//! With RequireStable (v7+; what the Java client and this crate send) it is a write operation
//! without records (`scheduleWriteOperation`): it reads the latest state and its answer waits
//! until every earlier write committed, so it is computed here when those writes commit, which
//! gives the same offsets (later writes commit after it). No transactional offsets exist, so
//! UNSTABLE_OFFSET_COMMIT never applies.
//!
//! Simplified: a fetch validates the member against the latest group state (a broker read
//! without RequireStable uses the state as of the last committed offset; group changes are not
//! appended as records here).

use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    GroupId, OffsetCommitRequest, OffsetFetchRequest, OffsetFetchResponse, ResponseKind, TopicName,
};

use super::classic::{ClassicGroup, GroupState};
use super::consumer::ConsumerGroup;
use super::log::Record;
use super::messages::offset_commit_answer;
use super::{Append, Parked, Reply, SimCoordinator, name, s, topic_id};
use crate::request::ResponseBody;
use crate::sim::codes::*;

/// A committed offset and its metadata.
type Committed = (i64, Option<String>);
/// One topic of an OffsetFetch answer: name, id, and per partition its committed offset.
type TopicOffsets = (String, uuid::Uuid, Vec<(i32, Committed)>);

/// A RequireStable OffsetFetch (a write operation without records): answered once every
/// earlier write committed ([`SimCoordinator::offsets_committed`]), with the per-group
/// validation made when it was processed.
#[derive(Debug, Clone)]
pub(super) struct OffsetAppend {
    p: Parked,
    request: OffsetFetchRequest,
    errors: Vec<i16>,
}

/// One group of an OffsetFetch, whatever the version's layout: id, member fields (v9+; null and
/// -1 before) and the partitions asked for (`None`: all of the group's offsets).
struct FetchGroup {
    group_id: String,
    member_id: Option<String>,
    member_epoch: i32,
    topics: Option<Vec<(String, uuid::Uuid, Vec<i32>)>>,
}

/// The answer for one group: a group-level error, or per topic its partitions' offsets.
struct FetchAnswer {
    code: i16,
    topics: Vec<TopicOffsets>,
}

impl SimCoordinator {
    /// `OffsetMetadataManager.commitOffset` with `ClassicGroup.validateOffsetCommit` (classic) or
    /// `ConsumerGroup.validateOffsetCommit` (see [`Self::validate_consumer_commit`]).
    pub(super) fn offset_commit(&mut self, p: Parked, r: OffsetCommitRequest) {
        let generation = r.generation_id_or_member_epoch;
        let member_id = r.member_id.to_string();
        let instance = r.group_instance_id.as_ref().map(|i| i.to_string());
        let code = if r.group_id.0.as_str() != self.config.group_id {
            NOT_COORDINATOR
        } else if let Some(g) = &self.classic {
            self.validate_classic_commit(g, generation, &member_id, instance.as_deref())
        } else if let Some(c) = &self.consumer {
            self.validate_consumer_commit(c, &r, p.version)
        } else if generation < 0 {
            // A simple group: offsets of a group that does not use group management.
            NONE
        } else if p.version >= 9 {
            GROUP_ID_NOT_FOUND
        } else {
            ILLEGAL_GENERATION
        };
        let reply = Reply {
            conn: p.conn,
            correlation: p.correlation,
            version: p.version,
            body: ResponseBody::Kafka(ResponseKind::OffsetCommit(offset_commit_answer(&r, code))),
        };
        if code != NONE {
            self.note(|| {
                format!(
                    "OffsetCommit by {member_id} gen {generation}: {}",
                    name(code)
                )
            });
            return self.replies.push_back(reply);
        }
        // In the classic protocol, commits keep the session alive in Stable and
        // PreparingRebalance.
        if let Some(g) = &self.classic
            && matches!(g.state, GroupState::Stable | GroupState::PreparingRebalance)
            && g.members.contains_key(&member_id)
        {
            self.reschedule_heartbeat(&member_id, None);
        }
        let offsets = r
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|part| {
                    (
                        (t.name.0.to_string(), part.partition_index),
                        (
                            part.committed_offset,
                            part.committed_metadata.as_ref().map(|m| m.to_string()),
                        ),
                    )
                })
            })
            .collect();
        // The offsets are the operation's OffsetCommitValue records: visible once they commit,
        // whether or not the operation timed out first (`advance_log`); the answer waits too.
        let at = self.now + self.config.append_latency;
        self.write_record(Record::Offsets(Box::new(offsets)));
        self.appends
            .push_back((at, Append::Answer(Box::new(reply))));
    }

    /// `ConsumerGroup.validateOffsetCommit`: epoch < 0 and no members ⇒ accepted; unknown member
    /// ⇒ UNKNOWN_MEMBER_ID; a consumer-protocol member below v9 ⇒ UNSUPPORTED_VERSION; then the
    /// epoch. 4.0-4.2 (`validateMemberEpoch`): it must be the member's. 4.3+ (KIP-1251): the
    /// member's ⇒ accepted; newer ⇒ STALE_MEMBER_EPOCH; older ⇒ per committed partition
    /// (`createAssignmentEpochValidator`): the member must hold it (assigned or pending
    /// revocation) since an epoch no newer than the one sent, else STALE_MEMBER_EPOCH for the
    /// whole request (the validator throws).
    fn validate_consumer_commit(&self, c: &ConsumerGroup, r: &OffsetCommitRequest, v: i16) -> i16 {
        let epoch = r.generation_id_or_member_epoch;
        if epoch < 0 && c.members.is_empty() {
            return NONE;
        }
        let Some(m) = c.members.get(r.member_id.as_str()) else {
            return UNKNOWN_MEMBER_ID;
        };
        if v < 9 {
            return UNSUPPORTED_VERSION;
        }
        if epoch == m.epoch {
            return NONE;
        }
        if epoch > m.epoch || !self.config.rules.profile.per_partition_commit_epochs() {
            return STALE_MEMBER_EPOCH;
        }
        let fits = r.topics.iter().all(|t| {
            t.partitions.iter().all(|part| {
                m.partition_epoch(&(t.name.0.to_string(), part.partition_index))
                    .is_some_and(|since| epoch >= since)
            })
        });
        if fits { NONE } else { STALE_MEMBER_EPOCH }
    }

    /// `ClassicGroup.validateOffsetCommit`.
    fn validate_classic_commit(
        &self,
        g: &ClassicGroup,
        generation: i32,
        member_id: &str,
        instance: Option<&str>,
    ) -> i16 {
        if g.state == GroupState::Dead {
            return COORDINATOR_NOT_AVAILABLE;
        }
        if generation < 0 && g.state == GroupState::Empty {
            return NONE;
        }
        if generation >= 0 || !member_id.is_empty() || instance.is_some() {
            if let Err(code) = g.validate_member(member_id, instance) {
                return code;
            }
            if generation != g.generation {
                return ILLEGAL_GENERATION;
            }
        } else if g.state != GroupState::Empty {
            return UNKNOWN_MEMBER_ID;
        }
        if g.state == GroupState::CompletingRebalance {
            return REBALANCE_IN_PROGRESS;
        }
        NONE
    }

    /// OffsetFetch, every version the broker advertises (1-9): v1-7 carry one group in the
    /// request's top-level fields, v8+ a list of groups (`KafkaApis.handleOffsetFetchRequest`).
    /// Each group is validated now; with RequireStable (v7+) its offsets are read once the
    /// writes before it committed, else at once from the committed offsets (see the module
    /// docs).
    pub(super) fn offset_fetch(&mut self, p: Parked, r: OffsetFetchRequest) {
        let stable = p.version >= 7 && r.require_stable;
        let errors: Vec<i16> = fetch_groups(&r, p.version)
            .iter()
            .map(|g| self.validate_offset_fetch(g))
            .collect();
        match self.log.back_mut() {
            Some(write) if stable && errors.contains(&NONE) => {
                // GroupCoordinatorService.fetchOffsets: a write operation, completed after the
                // writes before it (it fails with the last one if that times out).
                let a = OffsetAppend {
                    p,
                    request: r,
                    errors,
                };
                write.on_commit.push(Append::Offsets(Box::new(a)));
                self.note(|| "RequireStable OffsetFetch waits for pending writes".into());
            }
            _ => self.answer_offset_fetch(p, &r, &errors),
        }
    }

    /// The writes before a waiting RequireStable fetch committed: it is answered.
    pub(super) fn offsets_committed(&mut self, a: OffsetAppend) {
        self.answer_offset_fetch(a.p, &a.request, &a.errors)
    }

    /// An offset append failed with `code`: a commit's offsets never become visible (its
    /// answer, a separate [`Append::Answer`], carries the error); a waiting RequireStable fetch
    /// is answered with it.
    pub(super) fn offsets_failed(&mut self, a: OffsetAppend, code: i16) {
        let failed = vec![code; a.errors.len()];
        self.answer_offset_fetch(a.p, &a.request, &failed);
    }

    /// The group's `validateOffsetFetch` (and `GroupCoordinatorService`'s routing: a group this
    /// coordinator does not serve ⇒ NOT_COORDINATOR). Consumer groups
    /// (`ConsumerGroup.validateOffsetFetch`): no member id and a negative epoch ⇒ accepted; else
    /// the member must exist (UNKNOWN_MEMBER_ID) and the epoch be its own (STALE_MEMBER_EPOCH).
    /// Classic groups (`ClassicGroup.validateOffsetFetch`) check nothing but Dead; a group that
    /// does not exist answers its offsets (none: every partition -1).
    fn validate_offset_fetch(&self, g: &FetchGroup) -> i16 {
        if g.group_id != self.config.group_id {
            return NOT_COORDINATOR;
        }
        let Some(c) = &self.consumer else {
            return NONE;
        };
        let Some(member_id) = &g.member_id else {
            return if g.member_epoch < 0 {
                NONE
            } else {
                UNKNOWN_MEMBER_ID
            };
        };
        match c.members.get(member_id) {
            None => UNKNOWN_MEMBER_ID,
            Some(m) if m.epoch != g.member_epoch => STALE_MEMBER_EPOCH,
            Some(_) => NONE,
        }
    }

    /// Answers an OffsetFetch from the committed offsets, laid out for its version
    /// (`OffsetFetchResponse.Builder.build`; a group error on v1, which has no top-level error
    /// code, goes into every partition: `OffsetFetchResponse.groupError`).
    fn answer_offset_fetch(&mut self, p: Parked, r: &OffsetFetchRequest, errors: &[i16]) {
        let answers: Vec<(String, FetchAnswer)> = fetch_groups(r, p.version)
            .into_iter()
            .zip(errors)
            .map(|(g, code)| {
                let answer = self.fetch_answer(&g, *code);
                (g.group_id, answer)
            })
            .collect();
        for (g, a) in &answers {
            if a.code != NONE {
                let code = a.code;
                self.note(|| format!("OffsetFetch of {g}: {}", name(code)));
            }
        }
        let resp = if p.version >= 8 {
            OffsetFetchResponse::default().with_groups(
                answers
                    .into_iter()
                    .map(|(g, a)| {
                        OffsetFetchResponseGroup::default()
                            .with_group_id(GroupId(s(&g)))
                            .with_error_code(a.code)
                            .with_topics(
                                a.topics
                                    .into_iter()
                                    .map(|(t, id, parts)| {
                                        OffsetFetchResponseTopics::default()
                                            .with_name(TopicName(s(&t)))
                                            .with_topic_id(if p.version >= 10 {
                                                id
                                            } else {
                                                uuid::Uuid::nil()
                                            })
                                            .with_partitions(
                                                parts
                                                    .into_iter()
                                                    .map(|(i, (o, m))| {
                                                        OffsetFetchResponsePartitions::default()
                                                            .with_partition_index(i)
                                                            .with_committed_offset(o)
                                                            .with_metadata(Some(s(m
                                                                .as_deref()
                                                                .unwrap_or(""))))
                                                    })
                                                    .collect(),
                                            )
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            )
        } else {
            let (_, a) = answers.into_iter().next().expect("one group below v8");
            let partition_code = if p.version < 2 { a.code } else { NONE };
            OffsetFetchResponse::default()
                .with_error_code(if p.version >= 2 { a.code } else { NONE })
                .with_topics(
                    a.topics
                        .into_iter()
                        .map(|(t, _, parts)| {
                            OffsetFetchResponseTopic::default()
                                .with_name(TopicName(s(&t)))
                                .with_partitions(
                                    parts
                                        .into_iter()
                                        .map(|(i, (o, m))| {
                                            OffsetFetchResponsePartition::default()
                                                .with_partition_index(i)
                                                .with_committed_offset(o)
                                                .with_metadata(Some(s(m.as_deref().unwrap_or(""))))
                                                .with_error_code(partition_code)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                )
        };
        self.reply(p, ResponseKind::OffsetFetch(resp));
    }

    /// `OffsetMetadataManager.fetchOffsets` / `fetchAllOffsets` over the committed offsets; a
    /// group error drops the topics (v2+), except on v1 where every asked partition carries it.
    fn fetch_answer(&self, g: &FetchGroup, code: i16) -> FetchAnswer {
        let lookup = |t: &str, i: i32| {
            self.offsets
                .get(&(t.to_owned(), i))
                .cloned()
                .unwrap_or((-1, None))
        };
        let topics = match &g.topics {
            Some(ts) => ts
                .iter()
                .map(|(t, id, parts)| {
                    let parts = parts
                        .iter()
                        .map(|i| {
                            let c = if code == NONE {
                                lookup(t, *i)
                            } else {
                                (-1, None)
                            };
                            (*i, c)
                        })
                        .collect();
                    (t.clone(), *id, parts)
                })
                .collect(),
            None if code == NONE => {
                let mut by_topic: Vec<TopicOffsets> = Vec::new();
                for ((t, i), c) in &self.offsets {
                    match by_topic.last_mut() {
                        Some((last, _, parts)) if last == t => parts.push((*i, c.clone())),
                        _ => by_topic.push((t.clone(), topic_id(t), vec![(*i, c.clone())])),
                    }
                }
                by_topic
            }
            None => Vec::new(),
        };
        FetchAnswer { code, topics }
    }
}

/// The request's groups in one shape: the top-level group below v8, the list from v8 on.
fn fetch_groups(r: &OffsetFetchRequest, version: i16) -> Vec<FetchGroup> {
    if version >= 8 {
        r.groups
            .iter()
            .map(|g| FetchGroup {
                group_id: g.group_id.0.to_string(),
                member_id: g.member_id.as_ref().map(|m| m.to_string()),
                member_epoch: g.member_epoch,
                topics: g.topics.as_ref().map(|ts| {
                    ts.iter()
                        .map(|t| {
                            (
                                t.name.0.to_string(),
                                t.topic_id,
                                t.partition_indexes.clone(),
                            )
                        })
                        .collect()
                }),
            })
            .collect()
    } else {
        vec![FetchGroup {
            group_id: r.group_id.0.to_string(),
            member_id: None,
            member_epoch: -1,
            topics: r.topics.as_ref().map(|ts| {
                ts.iter()
                    .map(|t| {
                        let name = t.name.0.to_string();
                        let id = topic_id(&name);
                        (name, id, t.partition_indexes.clone())
                    })
                    .collect()
            }),
        }]
    }
}
