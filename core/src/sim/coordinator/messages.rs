//! Answers and descriptions that do not depend on a group's state: the error answer to any
//! request, the first error code of an answer, error names, topic ids, and the one-line
//! descriptions of requests and answers the traces print.

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::OffsetFetchResponseGroup;
use kafka_protocol::messages::{
    ConsumerGroupHeartbeatResponse, FindCoordinatorResponse, HeartbeatResponse, JoinGroupResponse,
    LeaveGroupResponse, MetadataResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetFetchResponse, RequestKind, ResponseKind, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::s;
use crate::messages::streams_group_describe_response::DescribedGroup;
use crate::messages::{
    StreamsGroupDescribeResponse, StreamsGroupHeartbeatResponse,
    StreamsGroupTopologyDescriptionUpdateResponse,
};
use crate::request::{RequestBody, ResponseBody, api_key_of};
use crate::sim::codes::*;

/// The error's name (`Errors.java`).
pub fn name(code: i16) -> String {
    crate::error::error_name(code)
}

/// A stable topic id for `topic` (a hash of its name), never the zero id.
pub fn topic_id(topic: &str) -> uuid::Uuid {
    let mut h: u128 = 0xcbf2_9ce4_8422_2325_cbf2_9ce4_8422_2325;
    for b in topic.bytes() {
        h ^= u128::from(b);
        h = h.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
    }
    uuid::Uuid::from_u128(h | 1)
}

/// [`error_response`] for any request body: the streams-group requests are answered as Kafka's
/// `StreamsGroupHeartbeatRequest.getErrorResponse` / `StreamsGroupDescribeRequest.getErrorResponse`
/// do (the code at the top level; for a describe, on every group asked about).
pub fn error_body(request: &RequestBody, version: i16, code: i16) -> ResponseBody {
    match request {
        RequestBody::Kafka(r) => ResponseBody::Kafka(error_response(r, version, code)),
        RequestBody::StreamsGroupHeartbeat(_) => ResponseBody::StreamsGroupHeartbeat(
            StreamsGroupHeartbeatResponse::default().with_error_code(code),
        ),
        RequestBody::StreamsGroupDescribe(r) => ResponseBody::StreamsGroupDescribe(
            StreamsGroupDescribeResponse::default().with_groups(
                r.group_ids
                    .iter()
                    .map(|g| {
                        DescribedGroup::default()
                            .with_group_id(g.clone())
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        ),
        RequestBody::StreamsGroupTopologyDescriptionUpdate(_) => {
            ResponseBody::StreamsGroupTopologyDescriptionUpdate(
                StreamsGroupTopologyDescriptionUpdateResponse::default().with_error_code(code),
            )
        }
    }
}

/// An answer to `request` carrying `code` (and nothing else that could be mistaken for data).
pub fn error_response(request: &RequestKind, version: i16, code: i16) -> ResponseKind {
    match request {
        RequestKind::JoinGroup(r) => ResponseKind::JoinGroup(
            JoinGroupResponse::default()
                .with_member_id(r.member_id.clone())
                .with_error_code(code)
                .with_protocol_name(if version >= 7 { None } else { Some(s("")) }),
        ),
        RequestKind::SyncGroup(_) => {
            ResponseKind::SyncGroup(SyncGroupResponse::default().with_error_code(code))
        }
        RequestKind::Heartbeat(_) => {
            ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(code))
        }
        RequestKind::LeaveGroup(_) => {
            ResponseKind::LeaveGroup(LeaveGroupResponse::default().with_error_code(code))
        }
        RequestKind::OffsetCommit(r) => ResponseKind::OffsetCommit(offset_commit_answer(r, code)),
        RequestKind::OffsetFetch(r) => {
            if version >= 8 {
                ResponseKind::OffsetFetch(
                    OffsetFetchResponse::default().with_groups(
                        r.groups
                            .iter()
                            .map(|g| {
                                OffsetFetchResponseGroup::default()
                                    .with_group_id(g.group_id.clone())
                                    .with_error_code(code)
                            })
                            .collect(),
                    ),
                )
            } else {
                ResponseKind::OffsetFetch(OffsetFetchResponse::default().with_error_code(code))
            }
        }
        RequestKind::ConsumerGroupHeartbeat(_) => ResponseKind::ConsumerGroupHeartbeat(
            ConsumerGroupHeartbeatResponse::default().with_error_code(code),
        ),
        RequestKind::FindCoordinator(_) => {
            ResponseKind::FindCoordinator(FindCoordinatorResponse::default().with_error_code(code))
        }
        RequestKind::Metadata(_) => {
            ResponseKind::Metadata(MetadataResponse::default().with_error_code(code))
        }
        _ => ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(code)),
    }
}

/// The answer to an OffsetCommit: every partition of the request with `code`.
pub(super) fn offset_commit_answer(r: &OffsetCommitRequest, code: i16) -> OffsetCommitResponse {
    OffsetCommitResponse::default().with_topics(
        r.topics
            .iter()
            .map(|t| {
                OffsetCommitResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_topic_id(t.topic_id)
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                OffsetCommitResponsePartition::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(code)
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

/// The first error code an answer carries (top level, else the first per-member / per-partition /
/// per-group).
pub fn response_error(body: &ResponseBody) -> i16 {
    fn first(codes: impl Iterator<Item = i16>) -> i16 {
        codes.into_iter().find(|c| *c != NONE).unwrap_or(NONE)
    }
    let body = match body {
        ResponseBody::Kafka(body) => body,
        ResponseBody::StreamsGroupHeartbeat(r) => return r.error_code,
        ResponseBody::StreamsGroupTopologyDescriptionUpdate(r) => return r.error_code,
        ResponseBody::StreamsGroupDescribe(r) => {
            return first(r.groups.iter().map(|g| g.error_code));
        }
    };
    match body {
        ResponseKind::JoinGroup(r) => r.error_code,
        ResponseKind::SyncGroup(r) => r.error_code,
        ResponseKind::Heartbeat(r) => r.error_code,
        ResponseKind::LeaveGroup(r) if r.error_code != NONE => r.error_code,
        ResponseKind::LeaveGroup(r) => first(r.members.iter().map(|m| m.error_code)),
        ResponseKind::OffsetCommit(r) => first(
            &mut r
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
        ),
        ResponseKind::OffsetFetch(r) if r.error_code != NONE => r.error_code,
        ResponseKind::OffsetFetch(r) => first(r.groups.iter().map(|g| g.error_code)),
        ResponseKind::ConsumerGroupHeartbeat(r) => r.error_code,
        ResponseKind::FindCoordinator(r) if r.error_code != NONE => r.error_code,
        ResponseKind::FindCoordinator(r) => first(r.coordinators.iter().map(|c| c.error_code)),
        ResponseKind::Metadata(r) => r.error_code,
        _ => NONE,
    }
}

/// One line describing a request (for traces).
pub fn describe_request(body: &RequestBody) -> String {
    let opt = |o: &Option<StrBytes>| o.as_deref().map_or("-".to_owned(), |x| x.to_owned());
    let body = match body {
        RequestBody::Kafka(body) => body,
        RequestBody::StreamsGroupHeartbeat(r) => {
            return format!(
                "StreamsGroupHeartbeat member={:?} epoch={} instance={}",
                r.member_id.as_str(),
                r.member_epoch,
                opt(&r.instance_id)
            );
        }
        RequestBody::StreamsGroupDescribe(r) => {
            return format!("StreamsGroupDescribe groups={}", r.group_ids.len());
        }
        RequestBody::StreamsGroupTopologyDescriptionUpdate(r) => {
            return format!(
                "StreamsGroupTopologyDescriptionUpdate member={:?} topology_epoch={}",
                r.member_id.as_str(),
                r.topology_epoch
            );
        }
    };
    match body {
        RequestKind::JoinGroup(r) => format!(
            "JoinGroup member={:?} instance={} protocols={}",
            r.member_id.as_str(),
            opt(&r.group_instance_id),
            r.protocols.len()
        ),
        RequestKind::SyncGroup(r) => format!(
            "SyncGroup member={:?} instance={} gen={} assignments={}",
            r.member_id.as_str(),
            opt(&r.group_instance_id),
            r.generation_id,
            r.assignments.len()
        ),
        RequestKind::Heartbeat(r) => format!(
            "Heartbeat member={:?} instance={} gen={}",
            r.member_id.as_str(),
            opt(&r.group_instance_id),
            r.generation_id
        ),
        RequestKind::LeaveGroup(r) => format!(
            "LeaveGroup members={:?}",
            r.members
                .iter()
                .map(|m| m.member_id.to_string())
                .collect::<Vec<_>>()
        ),
        RequestKind::OffsetCommit(r) => format!(
            "OffsetCommit member={:?} gen={} partitions={}",
            r.member_id.as_str(),
            r.generation_id_or_member_epoch,
            r.topics.iter().map(|t| t.partitions.len()).sum::<usize>()
        ),
        RequestKind::OffsetFetch(_) => "OffsetFetch".into(),
        RequestKind::FindCoordinator(_) => "FindCoordinator".into(),
        RequestKind::Metadata(_) => "Metadata".into(),
        RequestKind::ConsumerGroupHeartbeat(r) => format!(
            "ConsumerGroupHeartbeat member={:?} epoch={} instance={}",
            r.member_id.as_str(),
            r.member_epoch,
            opt(&r.instance_id)
        ),
        other => api_key_of(other).map_or_else(|| "unlisted request".into(), |k| format!("{k:?}")),
    }
}

/// One line describing an answer (for traces).
pub fn describe_response(body: &ResponseBody) -> String {
    let code = response_error(body);
    let err = name(code);
    let body = match body {
        ResponseBody::Kafka(body) => body,
        ResponseBody::StreamsGroupHeartbeat(r) => {
            return format!("StreamsGroupHeartbeat {err} epoch={}", r.member_epoch);
        }
        ResponseBody::StreamsGroupDescribe(_) => return format!("StreamsGroupDescribe {err}"),
        ResponseBody::StreamsGroupTopologyDescriptionUpdate(_) => {
            return format!("StreamsGroupTopologyDescriptionUpdate {err}");
        }
    };
    match body {
        ResponseKind::JoinGroup(r) if code == NONE => format!(
            "JoinGroup NONE member={:?} gen={} leader={:?} members={}{}",
            r.member_id.as_str(),
            r.generation_id,
            r.leader.as_str(),
            r.members.len(),
            if r.skip_assignment { " skip" } else { "" }
        ),
        ResponseKind::JoinGroup(r) => format!("JoinGroup {err} member={:?}", r.member_id.as_str()),
        ResponseKind::SyncGroup(r) => {
            format!("SyncGroup {err} assignment={}B", r.assignment.len())
        }
        ResponseKind::Heartbeat(_) => format!("Heartbeat {err}"),
        ResponseKind::LeaveGroup(_) => format!("LeaveGroup {err}"),
        ResponseKind::OffsetCommit(_) => format!("OffsetCommit {err}"),
        ResponseKind::OffsetFetch(_) => format!("OffsetFetch {err}"),
        ResponseKind::FindCoordinator(_) => format!("FindCoordinator {err}"),
        ResponseKind::Metadata(_) => format!("Metadata {err}"),
        ResponseKind::ConsumerGroupHeartbeat(r) => {
            format!("ConsumerGroupHeartbeat {err} epoch={}", r.member_epoch)
        }
        _ => format!("answer {err}"),
    }
}
