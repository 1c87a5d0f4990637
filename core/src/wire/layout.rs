//! The size pre-check of every response body this crate decodes: a walk (`crate::wire::bounded`) over
//! the body that reads each array count and each string and bytes length exactly where
//! kafka-protocol 0.18.0's decoder reads it, and fails when one claims more than the bytes left.
//!
//! kafka-protocol 0.18.0 reserves `count` elements before decoding an array, so a forged count
//! (2^32 elements in a 12-byte answer) aborts the process on the failed allocation. The walk runs
//! first and allocates nothing; when it passes, every count the decoder will read fits in the
//! frame. A response of an API without a layout here is refused, never decoded unchecked.
//!
//! The layouts follow the Apache Kafka message schemas (`clients/src/main/resources/common/
//! message/*Response.json`) at the versions kafka-protocol 0.18.0 generates, with flexible
//! versions (compact lengths, tagged fields) as listed. The first twelve are what the crate sends
//! itself; the others are what users plausibly send as [`Request::Raw`](crate::request::Request)
//! (a consumer's Fetch and ListOffsets, Produce, and the admin calls this crate's own tests make),
//! and the share sessions' ShareFetch and ShareAcknowledge (`machine::share::session`).
//!
//! | response | versions | flexible |
//! |---|---|---|
//! | ApiVersions | 0-4 | 3+ |
//! | SaslHandshake | 0-1 | none |
//! | SaslAuthenticate | 0-2 | 2+ |
//! | FindCoordinator | 0-6 | 3+ |
//! | Metadata | 0-13 | 9+ |
//! | JoinGroup | 0-9 | 6+ |
//! | SyncGroup | 0-5 | 4+ |
//! | Heartbeat | 0-4 | 4+ |
//! | LeaveGroup | 0-5 | 4+ |
//! | OffsetCommit | 2-10 | 8+ |
//! | OffsetFetch | 1-10 | 6+ |
//! | ConsumerGroupHeartbeat | 0-1 | 0+ |
//! | Fetch | 4-18 | 12+ |
//! | ListOffsets | 1-10 | 6+ |
//! | Produce | 3-13 | 9+ |
//! | CreateTopics | 2-7 | 5+ |
//! | DescribeGroups | 0-6 | 5+ |
//! | ConsumerGroupDescribe | 0-1 | 0+ |
//! | DescribeConfigs | 1-4 | 4+ |
//! | IncrementalAlterConfigs | 0-1 | 1+ |
//! | ShareGroupHeartbeat | 1 | 1+ |
//! | ShareGroupDescribe | 1 | 1+ |
//! | ShareFetch | 1 | 1+ |
//! | ShareAcknowledge | 1 | 1+ |
//!
//! The records of a Fetch answer stay bytes: kafka-protocol does not decode them as part of the
//! response, so no record count is read here.

use kafka_protocol::messages::ApiKey;

use crate::wire::bounded::{Cursor, Walk};

/// The versions of `api` this module has a layout for; `None` for an API it does not know.
pub(super) fn known_versions(api: ApiKey) -> Option<(i16, i16)> {
    Some(match api {
        ApiKey::ApiVersions => (0, 4),
        ApiKey::SaslHandshake => (0, 1),
        ApiKey::SaslAuthenticate => (0, 2),
        ApiKey::FindCoordinator => (0, 6),
        ApiKey::Metadata => (0, 13),
        ApiKey::JoinGroup => (0, 9),
        ApiKey::SyncGroup => (0, 5),
        ApiKey::Heartbeat => (0, 4),
        ApiKey::LeaveGroup => (0, 5),
        ApiKey::OffsetCommit => (2, 10),
        ApiKey::OffsetFetch => (1, 10),
        ApiKey::ConsumerGroupHeartbeat => (0, 1),
        ApiKey::Fetch => (4, 18),
        ApiKey::ListOffsets => (1, 10),
        ApiKey::Produce => (3, 13),
        ApiKey::CreateTopics => (2, 7),
        ApiKey::DescribeGroups => (0, 6),
        ApiKey::ConsumerGroupDescribe => (0, 1),
        ApiKey::DescribeConfigs => (1, 4),
        ApiKey::IncrementalAlterConfigs => (0, 1),
        ApiKey::ShareGroupHeartbeat => (1, 1),
        ApiKey::ShareGroupDescribe => (1, 1),
        ApiKey::ShareFetch => (1, 1),
        ApiKey::ShareAcknowledge => (1, 1),
        _ => return None,
    })
}

/// Why an answer of `api` at `version` cannot be decoded safely, when this module has no layout
/// for it.
pub(super) fn no_layout(api: ApiKey, version: i16) -> Option<String> {
    match known_versions(api) {
        None => Some(format!(
            "no size layout for {api:?} responses: not decoded unchecked (see transport::wire::decode_response)"
        )),
        Some((lo, hi)) if !(lo..=hi).contains(&version) => Some(format!(
            "no size layout for {api:?} v{version} responses (v{lo}-{hi} are walked)"
        )),
        Some(_) => None,
    }
}

/// Walks the response body `body` (after the response header) of `api` at `version`. An API or
/// version without a layout here fails.
pub(super) fn check_sizes(api: ApiKey, version: i16, body: &[u8]) -> Walk {
    if let Some(reason) = no_layout(api, version) {
        return Err(reason);
    }
    let c = &mut Cursor::new(body);
    let v = version;
    match api {
        ApiKey::ApiVersions => api_versions(c, v),
        ApiKey::SaslHandshake => {
            c.skip(2)?;
            c.array(false, |c| c.string(false))
        }
        ApiKey::SaslAuthenticate => {
            let flex = v >= 2;
            c.skip(2)?;
            c.string(flex)?;
            c.bytes(flex)?;
            c.skip_if(v >= 1, 8)?;
            c.tags(flex)
        }
        ApiKey::FindCoordinator => find_coordinator(c, v),
        ApiKey::Metadata => metadata(c, v),
        ApiKey::JoinGroup => join_group(c, v),
        ApiKey::SyncGroup => {
            let flex = v >= 4;
            c.skip_if(v >= 1, 4)?;
            c.skip(2)?;
            if v >= 5 {
                c.string(true)?;
                c.string(true)?;
            }
            c.bytes(flex)?;
            c.tags(flex)
        }
        ApiKey::Heartbeat => {
            c.skip_if(v >= 1, 4)?;
            c.skip(2)?;
            c.tags(v >= 4)
        }
        ApiKey::LeaveGroup => {
            let flex = v >= 4;
            c.skip_if(v >= 1, 4)?;
            c.skip(2)?;
            if v >= 3 {
                c.array(flex, |c| {
                    c.string(flex)?;
                    c.string(flex)?;
                    c.skip(2)?;
                    c.tags(flex)
                })?;
            }
            c.tags(flex)
        }
        ApiKey::OffsetCommit => offset_commit(c, v),
        ApiKey::OffsetFetch => offset_fetch(c, v),
        // ShareGroupHeartbeatResponse.json v1 has ConsumerGroupHeartbeatResponse.json's fields:
        // ErrorMessage, MemberId, MemberEpoch, HeartbeatIntervalMs, a nullable Assignment of
        // TopicPartitions by topic id.
        ApiKey::ConsumerGroupHeartbeat | ApiKey::ShareGroupHeartbeat => consumer_group_heartbeat(c),
        ApiKey::ShareGroupDescribe => share_group_describe(c),
        ApiKey::ShareFetch => share_fetch(c),
        ApiKey::ShareAcknowledge => share_acknowledge(c),
        ApiKey::Fetch => fetch(c, v),
        ApiKey::ListOffsets => list_offsets(c, v),
        ApiKey::Produce => produce(c, v),
        ApiKey::CreateTopics => create_topics(c, v),
        ApiKey::DescribeGroups => describe_groups(c, v),
        ApiKey::ConsumerGroupDescribe => consumer_group_describe(c, v),
        ApiKey::DescribeConfigs => describe_configs(c, v),
        ApiKey::IncrementalAlterConfigs => {
            // IncrementalAlterConfigsResponse.json: ThrottleTimeMs, Responses [ErrorCode,
            // ErrorMessage, ResourceType, ResourceName].
            let flex = v >= 1;
            c.skip(4)?;
            c.array(flex, |c| {
                c.skip(2)?;
                c.string(flex)?;
                c.skip(1)?;
                c.string(flex)?;
                c.tags(flex)
            })?;
            c.tags(flex)
        }
        _ => Err(format!("no size layout for {api:?} responses")),
    }
}

/// DescribeConfigsResponse.json (v1+, what the members send to read the group's session
/// timeout): ThrottleTimeMs, Results [ErrorCode, ErrorMessage, ResourceType, ResourceName,
/// Configs [Name, Value, ReadOnly, ConfigSource, IsSensitive, Synonyms [Name, Value, Source],
/// ConfigType (v3+), Documentation (v3+)]].
fn describe_configs(c: &mut Cursor, v: i16) -> Walk {
    let flex = v >= 4;
    c.skip(4)?;
    c.array(flex, |c| {
        c.skip(2)?;
        c.string(flex)?;
        c.skip(1)?;
        c.string(flex)?;
        c.array(flex, |c| {
            c.string(flex)?;
            c.string(flex)?;
            c.skip(3)?;
            c.array(flex, |c| {
                c.string(flex)?;
                c.string(flex)?;
                c.skip(1)?;
                c.tags(flex)
            })?;
            if v >= 3 {
                c.skip(1)?;
                c.string(flex)?;
            }
            c.tags(flex)
        })?;
        c.tags(flex)
    })?;
    c.tags(flex)
}

/// ApiVersionsResponse.json: ErrorCode, ApiKeys, ThrottleTimeMs (v1+), and in v3+ the tagged
/// SupportedFeatures (0), FinalizedFeaturesEpoch (1), FinalizedFeatures (2), ZkMigrationReady (3),
/// which kafka-protocol decodes in place, ignoring the tagged size.
fn api_versions(c: &mut Cursor, v: i16) -> Walk {
    let flex = v >= 3;
    c.skip(2)?;
    c.field("ApiKeys", |c| {
        c.array(flex, |c| {
            c.skip(6)?;
            c.tags(flex)
        })
    })?;
    c.skip_if(v >= 1, 4)?;
    if !flex {
        return Ok(());
    }
    let feature = |c: &mut Cursor| {
        c.field("Name", |c| c.string(true))?;
        c.skip(4)?;
        c.tags(true)
    };
    c.tags_with(|c, tag| match tag {
        0 => Some(c.field("SupportedFeatures", |c| c.array(true, feature))),
        2 => Some(c.field("FinalizedFeatures", |c| c.array(true, feature))),
        1 => Some(c.skip(8)),
        3 => Some(c.skip(1)),
        _ => None,
    })
}

/// FindCoordinatorResponse.json: one coordinator in v0-3, `Coordinators` in v4+.
fn find_coordinator(c: &mut Cursor, v: i16) -> Walk {
    let flex = v >= 3;
    c.skip_if(v >= 1, 4)?;
    if v <= 3 {
        c.skip(2)?;
        if v >= 1 {
            c.field("ErrorMessage", |c| c.string(flex))?;
        }
        c.skip(4)?;
        c.field("Host", |c| c.string(flex))?;
        c.skip(4)?;
    } else {
        c.field("Coordinators", |c| {
            c.array(true, |c| {
                c.field("Key", |c| c.string(true))?;
                c.skip(4)?;
                c.field("Host", |c| c.string(true))?;
                c.skip(6)?;
                c.field("ErrorMessage", |c| c.string(true))?;
                c.tags(true)
            })
        })?;
    }
    c.tags(flex)
}

/// MetadataResponse.json: Brokers, ClusterId, ControllerId, Topics (with Partitions and their
/// replica, ISR and offline replica id arrays), cluster operations (v8-10), ErrorCode (v13).
fn metadata(c: &mut Cursor, v: i16) -> Walk {
    let flex = v >= 9;
    c.skip_if(v >= 3, 4)?;
    c.array(flex, |c| {
        c.skip(4)?;
        c.string(flex)?;
        c.skip(4)?;
        if v >= 1 {
            c.string(flex)?;
        }
        c.tags(flex)
    })?;
    if v >= 2 {
        c.string(flex)?;
    }
    c.skip_if(v >= 1, 4)?;
    let ids = |c: &mut Cursor| c.array(flex, |c| c.skip(4));
    let partition = |c: &mut Cursor| {
        c.skip(10)?;
        c.skip_if(v >= 7, 4)?;
        ids(c)?;
        ids(c)?;
        if v >= 5 {
            ids(c)?;
        }
        c.tags(flex)
    };
    c.array(flex, |c| {
        c.skip(2)?;
        c.string(flex)?;
        c.skip_if(v >= 10, 16)?;
        c.skip_if(v >= 1, 1)?;
        c.array(flex, partition)?;
        c.skip_if(v >= 8, 4)?;
        c.tags(flex)
    })?;
    c.skip_if((8..=10).contains(&v), 4)?;
    c.skip_if(v >= 13, 2)?;
    c.tags(flex)
}

/// JoinGroupResponse.json: ProtocolType (v7+), ProtocolName, Leader, SkipAssignment (v9+),
/// MemberId, Members (with GroupInstanceId in v5+ and Metadata bytes).
fn join_group(c: &mut Cursor, v: i16) -> Walk {
    let flex = v >= 6;
    c.skip_if(v >= 2, 4)?;
    c.skip(6)?;
    if v >= 7 {
        c.string(true)?;
    }
    c.string(flex)?;
    c.string(flex)?;
    c.skip_if(v >= 9, 1)?;
    c.string(flex)?;
    c.array(flex, |c| {
        c.string(flex)?;
        if v >= 5 {
            c.string(flex)?;
        }
        c.bytes(flex)?;
        c.tags(flex)
    })?;
    c.tags(flex)
}

/// OffsetCommitResponse.json: Topics by name (v2-9) or topic id (v10), with Partitions.
fn offset_commit(c: &mut Cursor, v: i16) -> Walk {
    let flex = v >= 8;
    c.skip_if(v >= 3, 4)?;
    by_topic(
        c,
        flex,
        |c| topic_name_or_id(c, v, flex),
        |c| {
            c.skip(6)?;
            c.tags(flex)
        },
    )?;
    c.tags(flex)
}

/// OffsetFetchResponse.json: Topics (v1-7) and ErrorCode (v2-7), or Groups (v8+) whose topics
/// are named (v8-9) or carry topic ids (v10).
fn offset_fetch(c: &mut Cursor, v: i16) -> Walk {
    let flex = v >= 6;
    c.skip_if(v >= 3, 4)?;
    if v <= 7 {
        c.array(flex, |c| {
            c.string(flex)?;
            c.array(flex, |c| {
                c.skip(12)?;
                c.skip_if(v >= 5, 4)?;
                c.string(flex)?;
                c.skip(2)?;
                c.tags(flex)
            })?;
            c.tags(flex)
        })?;
        c.skip_if(v >= 2, 2)?;
    } else {
        c.array(true, |c| {
            c.string(true)?;
            c.array(true, |c| {
                topic_name_or_id(c, v, true)?;
                c.array(true, |c| {
                    c.skip(16)?;
                    c.string(true)?;
                    c.skip(2)?;
                    c.tags(true)
                })?;
                c.tags(true)
            })?;
            c.skip(2)?;
            c.tags(true)
        })?;
    }
    c.tags(flex)
}

/// The topic name (up to v9) or topic id (v10) of OffsetCommit and OffsetFetch topics.
fn topic_name_or_id(c: &mut Cursor, v: i16, flex: bool) -> Walk {
    name_or_id_until(c, v, 9, flex)
}

/// A topic name up to version `last_named`, a topic id after it.
fn name_or_id_until(c: &mut Cursor, v: i16, last_named: i16, flex: bool) -> Walk {
    if v <= last_named {
        c.string(flex)
    } else {
        c.skip(16)
    }
}

/// An array of topics, each its `name` (or id), an array of partitions each walked by
/// `partition`, and its tagged fields.
fn by_topic(
    c: &mut Cursor,
    flex: bool,
    name: impl Fn(&mut Cursor) -> Walk,
    mut partition: impl FnMut(&mut Cursor) -> Walk,
) -> Walk {
    c.array(flex, |c| {
        name(c)?;
        c.array(flex, &mut partition)?;
        c.tags(flex)
    })
}

/// ConsumerGroupHeartbeatResponse.json: ErrorMessage, MemberId, and a nullable Assignment of
/// topic ids with partition arrays.
fn consumer_group_heartbeat(c: &mut Cursor) -> Walk {
    c.skip(6)?;
    c.string(true)?;
    c.string(true)?;
    c.skip(8)?;
    // A nullable struct: an INT8 that is 1 when present (kafka-protocol's `OptionStruct`).
    if c.int(1)? == 1 {
        c.array(true, |c| {
            c.skip(16)?;
            c.array(true, |c| c.skip(4))?;
            c.tags(true)
        })?;
        c.tags(true)?;
    }
    c.tags(true)
}

/// FetchResponse.json: Responses by topic name (v4-12) or topic id (v13+), with Partitions
/// (AbortedTransactions, Records as bytes, and in v12+ the tagged DivergingEpoch (0),
/// CurrentLeader (1) and SnapshotId (2)), and in v16+ the tagged NodeEndpoints (0).
fn fetch(c: &mut Cursor, v: i16) -> Walk {
    let flex = v >= 12;
    c.skip(4)?;
    c.skip_if(v >= 7, 6)?;
    let partition = |c: &mut Cursor| {
        c.skip(22)?;
        c.skip_if(v >= 5, 8)?;
        c.array(flex, |c| {
            c.skip(16)?;
            c.tags(flex)
        })?;
        c.skip_if(v >= 11, 4)?;
        c.bytes(flex)?;
        if !flex {
            return Ok(());
        }
        // DivergingEpoch: Epoch + EndOffset; CurrentLeader: LeaderId + LeaderEpoch; SnapshotId:
        // EndOffset + Epoch; each a struct with its own tagged fields.
        c.tags_with(|c, tag| {
            let fixed = match tag {
                0 | 2 => 12,
                1 => 8,
                _ => return None,
            };
            Some(c.skip(fixed).and_then(|()| c.tags(true)))
        })
    };
    by_topic(c, flex, |c| name_or_id_until(c, v, 12, flex), partition)?;
    if !flex {
        return Ok(());
    }
    c.tags_with(|c, tag| (tag == 0 && v >= 16).then(|| c.array(true, node_endpoint)))
}

/// The NodeEndpoints of Fetch (v16+), Produce (v10+), ShareFetch and ShareAcknowledge answers:
/// NodeId, Host, Port, Rack.
fn node_endpoint(c: &mut Cursor) -> Walk {
    c.skip(4)?;
    c.string(true)?;
    c.skip(4)?;
    c.string(true)?;
    c.tags(true)
}

/// ListOffsetsResponse.json: Topics with Partitions (Timestamp, Offset, LeaderEpoch in v4+).
fn list_offsets(c: &mut Cursor, v: i16) -> Walk {
    let flex = v >= 6;
    c.skip_if(v >= 2, 4)?;
    by_topic(
        c,
        flex,
        |c| c.string(flex),
        |c| {
            c.skip(22)?;
            c.skip_if(v >= 4, 4)?;
            c.tags(flex)
        },
    )?;
    c.tags(flex)
}

/// ProduceResponse.json: Responses by topic name (v3-12) or topic id (v13), with
/// PartitionResponses (RecordErrors and ErrorMessage in v8+, the tagged CurrentLeader (0) in
/// v10+), ThrottleTimeMs, and in v10+ the tagged NodeEndpoints (0).
fn produce(c: &mut Cursor, v: i16) -> Walk {
    let flex = v >= 9;
    let partition = |c: &mut Cursor| {
        c.skip(22)?;
        c.skip_if(v >= 5, 8)?;
        if v >= 8 {
            c.array(flex, |c| {
                c.skip(4)?;
                c.string(flex)?;
                c.tags(flex)
            })?;
            c.string(flex)?;
        }
        if !flex {
            return Ok(());
        }
        c.tags_with(|c, tag| (tag == 0 && v >= 10).then(|| c.skip(8).and_then(|()| c.tags(true))))
    };
    by_topic(c, flex, |c| name_or_id_until(c, v, 12, flex), partition)?;
    c.skip(4)?;
    if !flex {
        return Ok(());
    }
    c.tags_with(|c, tag| (tag == 0 && v >= 10).then(|| c.array(true, node_endpoint)))
}

/// CreateTopicsResponse.json: Topics (TopicId in v7+; NumPartitions, ReplicationFactor, Configs
/// and the tagged TopicConfigErrorCode (0) in v5+).
fn create_topics(c: &mut Cursor, v: i16) -> Walk {
    let flex = v >= 5;
    c.skip(4)?;
    c.array(flex, |c| {
        c.string(flex)?;
        c.skip_if(v >= 7, 16)?;
        c.skip(2)?;
        c.string(flex)?;
        if !flex {
            return Ok(());
        }
        c.skip(6)?;
        c.array(true, |c| {
            c.string(true)?;
            c.string(true)?;
            c.skip(3)?;
            c.tags(true)
        })?;
        c.tags_with(|c, tag| (tag == 0).then(|| c.skip(2)))
    })?;
    c.tags(flex)
}

/// DescribeGroupsResponse.json: Groups (ErrorMessage in v6+) with Members (GroupInstanceId in
/// v4+, MemberMetadata and MemberAssignment bytes), AuthorizedOperations (v3+).
fn describe_groups(c: &mut Cursor, v: i16) -> Walk {
    let flex = v >= 5;
    c.skip_if(v >= 1, 4)?;
    c.array(flex, |c| {
        c.skip(2)?;
        if v >= 6 {
            c.string(true)?;
        }
        for _ in 0..4 {
            c.string(flex)?;
        }
        c.array(flex, |c| {
            c.string(flex)?;
            if v >= 4 {
                c.string(flex)?;
            }
            c.string(flex)?;
            c.string(flex)?;
            c.bytes(flex)?;
            c.bytes(flex)?;
            c.tags(flex)
        })?;
        c.skip_if(v >= 3, 4)?;
        c.tags(flex)
    })?;
    c.tags(flex)
}

/// ConsumerGroupDescribeResponse.json: Groups with Members, each with its current and target
/// Assignment (topic id, name, partitions) and MemberType (v1+).
fn consumer_group_describe(c: &mut Cursor, v: i16) -> Walk {
    let member = |c: &mut Cursor| {
        for _ in 0..3 {
            c.string(true)?;
        }
        c.skip(4)?;
        c.string(true)?;
        c.string(true)?;
        c.array(true, |c| c.string(true))?;
        c.string(true)?;
        described_assignment(c)?;
        described_assignment(c)?;
        c.skip_if(v >= 1, 1)?;
        c.tags(true)
    };
    described_groups(c, member)
}

/// A member's Assignment in a ConsumerGroupDescribe or ShareGroupDescribe answer:
/// TopicPartitions [TopicId, TopicName, Partitions].
fn described_assignment(c: &mut Cursor) -> Walk {
    c.array(true, |c| {
        c.skip(16)?;
        c.string(true)?;
        c.array(true, |c| c.skip(4))?;
        c.tags(true)
    })?;
    c.tags(true)
}

/// The Groups of a ConsumerGroupDescribe or ShareGroupDescribe answer (after ThrottleTimeMs):
/// ErrorCode, ErrorMessage, GroupId, GroupState, GroupEpoch, AssignmentEpoch, AssignorName,
/// Members (each walked by `member`), AuthorizedOperations.
fn described_groups(c: &mut Cursor, member: impl Fn(&mut Cursor) -> Walk) -> Walk {
    c.skip(4)?;
    c.array(true, |c| {
        c.skip(2)?;
        for _ in 0..3 {
            c.string(true)?;
        }
        c.skip(8)?;
        c.string(true)?;
        c.array(true, &member)?;
        c.skip(4)?;
        c.tags(true)
    })?;
    c.tags(true)
}

/// ShareGroupDescribeResponse.json v1: Groups [ErrorCode, ErrorMessage, GroupId, GroupState,
/// GroupEpoch, AssignmentEpoch, AssignorName, Members [MemberId, RackId, MemberEpoch, ClientId,
/// ClientHost, SubscribedTopicNames, Assignment], AuthorizedOperations].
fn share_group_describe(c: &mut Cursor) -> Walk {
    let member = |c: &mut Cursor| {
        c.string(true)?;
        c.string(true)?;
        c.skip(4)?;
        c.string(true)?;
        c.string(true)?;
        c.array(true, |c| c.string(true))?;
        described_assignment(c)?;
        c.tags(true)
    };
    described_groups(c, member)
}

/// ShareFetchResponse.json v1: ThrottleTimeMs, ErrorCode, ErrorMessage,
/// AcquisitionLockTimeoutMs, Responses [TopicId, Partitions [PartitionIndex, ErrorCode,
/// ErrorMessage, AcknowledgeErrorCode, AcknowledgeErrorMessage, CurrentLeader {LeaderId,
/// LeaderEpoch}, Records, AcquiredRecords [FirstOffset, LastOffset, DeliveryCount]]],
/// NodeEndpoints. No tagged field is decoded in place.
fn share_fetch(c: &mut Cursor) -> Walk {
    c.skip(6)?;
    c.string(true)?;
    c.skip(4)?;
    let partition = |c: &mut Cursor| {
        c.skip(6)?;
        c.string(true)?;
        c.skip(2)?;
        c.string(true)?;
        c.skip(8)?;
        c.tags(true)?;
        c.bytes(true)?;
        c.array(true, |c| {
            c.skip(18)?;
            c.tags(true)
        })?;
        c.tags(true)
    };
    by_topic(c, true, |c| c.skip(16), partition)?;
    c.array(true, node_endpoint)?;
    c.tags(true)
}

/// ShareAcknowledgeResponse.json v1: ThrottleTimeMs, ErrorCode, ErrorMessage, Responses
/// [TopicId, Partitions [PartitionIndex, ErrorCode, ErrorMessage, CurrentLeader {LeaderId,
/// LeaderEpoch}]], NodeEndpoints.
fn share_acknowledge(c: &mut Cursor) -> Walk {
    c.skip(6)?;
    c.string(true)?;
    let partition = |c: &mut Cursor| {
        c.skip(6)?;
        c.string(true)?;
        c.skip(8)?;
        c.tags(true)?;
        c.tags(true)
    };
    by_topic(c, true, |c| c.skip(16), partition)?;
    c.array(true, node_endpoint)?;
    c.tags(true)
}
