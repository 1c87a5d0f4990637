//! OffsetCommit / OffsetFetch bodies and answers, shared by both protocols. The fencing fields
//! differ only in meaning: the classic member sends its generation, the consumer member its epoch.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::{
    GroupId, OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::TopicPartition;
use super::events::{CommitError, CommitId, CommitOffset, CommittedOffset, Event, FetchId};

/// Committed offsets by partition.
pub type Offsets = BTreeMap<TopicPartition, CommittedOffset>;

/// A commit or fetch waiting for the coordinator.
#[derive(Debug)]
pub(crate) enum Queued {
    Commit {
        id: CommitId,
        offsets: Vec<CommitOffset>,
    },
    Fetch {
        id: FetchId,
        partitions: Vec<TopicPartition>,
    },
}

/// Fails every queued commit and fetch with `error`.
pub(crate) fn fail_all(
    queue: &mut VecDeque<Queued>,
    events: &mut VecDeque<Event>,
    error: CommitError,
) {
    for q in queue.drain(..) {
        events.push_back(match q {
            Queued::Commit { id, .. } => Event::Committed {
                id,
                result: Err(error.clone()),
            },
            Queued::Fetch { id, .. } => Event::OffsetsFetched {
                id,
                result: Err(error.clone()),
            },
        });
    }
}

fn name(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// An OffsetCommit body carrying the member's fencing fields, and the partitions it commits.
pub(crate) fn commit_request(
    group: &str,
    generation_or_epoch: i32,
    member_id: &str,
    instance_id: Option<&str>,
    offsets: Vec<CommitOffset>,
) -> (OffsetCommitRequest, Vec<TopicPartition>) {
    let partitions = offsets.iter().map(|o| o.partition.clone()).collect();
    let mut by_topic: BTreeMap<String, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for o in offsets {
        by_topic.entry(o.partition.topic).or_default().push(
            OffsetCommitRequestPartition::default()
                .with_partition_index(o.partition.partition)
                .with_committed_offset(o.offset)
                .with_committed_leader_epoch(-1)
                .with_committed_metadata(o.metadata.map(StrBytes::from_string)),
        );
    }
    let body = OffsetCommitRequest::default()
        .with_group_id(GroupId(name(group)))
        .with_generation_id_or_member_epoch(generation_or_epoch)
        .with_member_id(name(member_id))
        .with_group_instance_id(instance_id.map(name))
        .with_topics(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    OffsetCommitRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(t)))
                        .with_partitions(ps)
                })
                .collect(),
        );
    (body, partitions)
}

/// What an OffsetCommit answer says: `Ok` when every partition sent was answered without error,
/// else the first partition error, or code -1 for a partition the answer left out (a silent gap
/// would be a lost commit).
pub(crate) fn commit_answer(
    r: &OffsetCommitResponse,
    sent: &[TopicPartition],
) -> Result<(), (Option<TopicPartition>, i16)> {
    let mut answered = BTreeSet::new();
    for t in &r.topics {
        for p in &t.partitions {
            let tp = TopicPartition::new(t.name.to_string(), p.partition_index);
            if p.error_code != 0 {
                return Err((Some(tp), p.error_code));
            }
            answered.insert(tp);
        }
    }
    match sent.iter().find(|p| !answered.contains(*p)) {
        None => Ok(()),
        Some(missing) => Err((Some(missing.clone()), -1)),
    }
}

/// An OffsetFetch body (v8+ batched form, RequireStable); `member` is `(member id, epoch)` for a
/// consumer-protocol member in its group (v9).
pub(crate) fn fetch_request(
    group: &str,
    member: Option<(&str, i32)>,
    partitions: Vec<TopicPartition>,
) -> OffsetFetchRequest {
    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        by_topic.entry(tp.topic).or_default().push(tp.partition);
    }
    let group = OffsetFetchRequestGroup::default()
        .with_group_id(GroupId(name(group)))
        .with_member_id(member.map(|(id, _)| name(id)))
        .with_member_epoch(member.map_or(-1, |(_, epoch)| epoch))
        .with_topics(Some(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    OffsetFetchRequestTopics::default()
                        .with_name(TopicName(StrBytes::from_string(t)))
                        .with_partition_indexes(ps)
                })
                .collect(),
        ));
    OffsetFetchRequest::default()
        .with_groups(vec![group])
        .with_require_stable(true)
}

/// Reads an OffsetFetch answer for `group`; `check` maps a non-zero group or partition code to
/// the error to return.
pub(crate) fn fetch_answer(
    r: &OffsetFetchResponse,
    group: &str,
    check: impl Fn(i16, Option<TopicPartition>) -> Result<(), CommitError>,
) -> Result<Offsets, CommitError> {
    let g = r
        .groups
        .iter()
        .find(|g| g.group_id.as_str() == group)
        .ok_or(CommitError::Rejected {
            partition: None,
            code: -1,
        })?;
    check(g.error_code, None)?;
    let mut out = BTreeMap::new();
    for t in &g.topics {
        for p in &t.partitions {
            let tp = TopicPartition::new(t.name.to_string(), p.partition_index);
            check(p.error_code, Some(tp.clone()))?;
            out.insert(
                tp,
                CommittedOffset {
                    offset: (p.committed_offset >= 0).then_some(p.committed_offset),
                    metadata: p.metadata.as_ref().map(|m| m.to_string()),
                },
            );
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::offset_commit_response::{
        OffsetCommitResponsePartition, OffsetCommitResponseTopic,
    };

    fn answer(parts: &[(i32, i16)]) -> OffsetCommitResponse {
        OffsetCommitResponse::default().with_topics(vec![
            OffsetCommitResponseTopic::default()
                .with_name(TopicName(name("t")))
                .with_partitions(
                    parts
                        .iter()
                        .map(|&(p, code)| {
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(p)
                                .with_error_code(code)
                        })
                        .collect(),
                ),
        ])
    }

    #[test]
    fn commit_answers_must_cover_every_partition() {
        let sent = vec![TopicPartition::new("t", 0), TopicPartition::new("t", 1)];
        assert_eq!(commit_answer(&answer(&[(0, 0), (1, 0)]), &sent), Ok(()));
        assert_eq!(
            commit_answer(&answer(&[(0, 0), (1, 22)]), &sent),
            Err((Some(TopicPartition::new("t", 1)), 22))
        );
        assert_eq!(
            commit_answer(&answer(&[(0, 0)]), &sent),
            Err((Some(TopicPartition::new("t", 1)), -1))
        );
    }

    #[test]
    fn commit_request_groups_by_topic_and_carries_fencing_fields() {
        let offsets = vec![
            CommitOffset {
                partition: TopicPartition::new("b", 1),
                offset: 5,
                metadata: None,
            },
            CommitOffset {
                partition: TopicPartition::new("a", 0),
                offset: 7,
                metadata: Some("m".into()),
            },
        ];
        let (r, parts) = commit_request("g", 3, "m-1", Some("i"), offsets);
        assert_eq!(parts.len(), 2);
        assert_eq!(
            (
                r.generation_id_or_member_epoch,
                r.member_id.as_str(),
                r.group_instance_id.as_deref()
            ),
            (3, "m-1", Some("i"))
        );
        assert_eq!(
            r.topics.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            vec!["a", "b"]
        );
        let f = fetch_request("g", Some(("m-1", 4)), vec![TopicPartition::new("a", 0)]);
        assert_eq!(
            (
                f.groups[0].member_id.as_deref(),
                f.groups[0].member_epoch,
                f.require_stable
            ),
            (Some("m-1"), 4, true)
        );
        let f = fetch_request("g", None, vec![]);
        assert_eq!(
            (f.groups[0].member_id.as_deref(), f.groups[0].member_epoch),
            (None, -1)
        );
    }
}
