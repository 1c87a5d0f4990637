//! Hostile sizes in the bytes this crate decodes (array counts, string and byte lengths, tagged
//! field counts and sizes) never make it allocate more than a small multiple of the bytes it was
//! given: every response the crate decodes, at every version kafka-protocol knows, and the
//! classic subscription and assignment bytes, with forged sizes written at every offset. A
//! counting global allocator (this test binary's own) records the largest single allocation of
//! the decoding thread, and the peak of the bytes it holds live.
//!
//! Large but well-formed bytes written by group members (subscriptions in JoinGroup, the
//! leader's assignments in SyncGroup) and large answers of the coordinator (KIP-848 and KIP-1071
//! assignments) must not grow the process either: what they decode to, through the state
//! machines included, stays within a small multiple of their size, and the member keeps running.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;

use bytes::Bytes;
use consumer_membership::TransportError;
use consumer_membership::machine::TopicPartition;
use consumer_membership::machine::classic::subscription::{Assignment, Subscription};
use consumer_membership::messages::streams_group_describe_response as sgd;
use consumer_membership::messages::streams_group_heartbeat_response as sgh;
use consumer_membership::messages::{
    StreamsGroupDescribeResponse, StreamsGroupHeartbeatResponse,
    StreamsGroupTopologyDescriptionUpdateResponse,
};
use consumer_membership::request::{Api, ResponseBody};
use consumer_membership::transport::wire;
use kafka_protocol::messages::api_versions_response::{ApiVersion, SupportedFeatureKey};
use kafka_protocol::messages::consumer_group_describe_response as cgd;
use kafka_protocol::messages::consumer_group_heartbeat_response as cgh;
use kafka_protocol::messages::create_topics_response as create_topics;
use kafka_protocol::messages::describe_groups_response as describe_groups;
use kafka_protocol::messages::fetch_response as fetch;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_offsets_response as list_offsets;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::produce_response as produce;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatResponse, CreateTopicsResponse, DescribeGroupsResponse, FetchResponse,
    FindCoordinatorResponse, GroupId, HeartbeatResponse, IncrementalAlterConfigsResponse,
    JoinGroupResponse, LeaveGroupResponse, ListOffsetsResponse, MetadataResponse,
    OffsetCommitResponse, OffsetFetchResponse, ProduceResponse, ResponseKind,
    SaslAuthenticateResponse, SaslHandshakeResponse, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_owned())
}

fn tp(t: &str, p: i32) -> TopicPartition {
    TopicPartition::new(t, p)
}

/// Classic assignment bytes: the SyncGroup answer's sample, and the base of the forged ones.
fn assignment() -> Bytes {
    Assignment {
        partitions: vec![tp("a", 0), tp("a", 1), tp("b", 0)],
        user_data: Some(Bytes::from_static(b"ud")),
    }
    .encode()
}

struct Counting;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    /// Bytes this thread allocated and did not free since the last `peak_live` started.
    static LIVE: Cell<isize> = const { Cell::new(0) };
    /// The most `LIVE` was since then.
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

fn live(delta: isize) {
    let _ = LIVE.try_with(|l| {
        let now = l.get() + delta;
        l.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
}

// SAFETY: every call is forwarded to `System` unchanged; `note` only updates a thread-local
// counter and does not allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        live(layout.size() as isize);
        // SAFETY: the caller's contract for `alloc` is passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        live(layout.size() as isize);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        live(new_size as isize - layout.size() as isize);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        live(-(layout.size() as isize));
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The largest single allocation `f` makes on this thread.
fn largest_allocation<T>(f: impl FnOnce() -> T) -> (usize, T) {
    LARGEST.with(|l| l.set(0));
    let out = f();
    (LARGEST.with(Cell::get), out)
}

/// The most bytes `f` held live at once on this thread (beyond what was live when it started),
/// and what it returned (still live then, so counted).
fn peak_live<T>(f: impl FnOnce() -> T) -> (usize, T) {
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    let out = f();
    (PEAK.with(Cell::get).max(0) as usize, out)
}

/// Allowed for decoding `n` bytes: each element of a decoded array takes at least one byte
/// of input, and no element type of these messages is near 1 KiB.
fn bound(n: usize) -> usize {
    64 * 1024 + 1024 * n
}

/// Forged sizes: INT32 and INT16 counts and lengths (huge, negative, -1), and unsigned
/// varints (compact counts and lengths, tagged field counts and sizes) near 2^32.
const FORGED: &[&[u8]] = &[
    &[0x7f, 0xff, 0xff, 0xff],
    &[0xff, 0xff, 0xff, 0xff],
    &[0x80, 0x00, 0x00, 0x00],
    &[0x00, 0xff, 0xff, 0xff],
    &[0xff, 0xff, 0xff, 0xff, 0x0f],
    &[0xfe, 0xff, 0xff, 0xff, 0x07],
    &[0x80, 0x80, 0x80, 0x80, 0x08],
    &[0x7f, 0xff],
    &[0xff, 0xfe],
];

/// Every way to write a forged size into `bytes`, at every offset.
fn forgeries(bytes: &[u8]) -> impl Iterator<Item = Vec<u8>> + '_ {
    (0..bytes.len()).flat_map(move |at| {
        FORGED.iter().map(move |f| {
            let mut b = bytes.to_vec();
            for (i, x) in f.iter().enumerate() {
                if let Some(slot) = b.get_mut(at + i) {
                    *slot = *x;
                }
            }
            b
        })
    })
}

fn tagged() -> BTreeMap<i32, Bytes> {
    BTreeMap::from([(100, Bytes::from_static(b"xy")), (101, Bytes::new())])
}

/// Bodies with two elements in every array (and unknown tagged fields first, for flexible
/// versions), richest first: each version uses the first that encodes there.
fn samples(api: ApiKey) -> Vec<ResponseKind> {
    let two = |x: i32| vec![BrokerId(x), BrokerId(x + 1)];
    match api {
        ApiKey::ApiVersions => {
            let keys = vec![
                ApiVersion::default().with_api_key(18).with_max_version(4),
                ApiVersion::default().with_api_key(11).with_max_version(9),
            ];
            let features = vec![
                SupportedFeatureKey::default().with_name(s("a")),
                SupportedFeatureKey::default().with_name(s("b")),
            ];
            let plain = ApiVersionsResponse::default().with_api_keys(keys);
            vec![
                ResponseKind::ApiVersions(
                    plain
                        .clone()
                        .with_supported_features(features)
                        .with_unknown_tagged_fields(tagged()),
                ),
                ResponseKind::ApiVersions(plain),
            ]
        }
        ApiKey::FindCoordinator => {
            let c = |k: &str| {
                Coordinator::default()
                    .with_key(s(k))
                    .with_host(s("h"))
                    .with_unknown_tagged_fields(tagged())
            };
            vec![
                ResponseKind::FindCoordinator(
                    FindCoordinatorResponse::default().with_coordinators(vec![c("a"), c("b")]),
                ),
                ResponseKind::FindCoordinator(
                    FindCoordinatorResponse::default()
                        .with_host(s("host"))
                        .with_unknown_tagged_fields(tagged()),
                ),
                ResponseKind::FindCoordinator(
                    FindCoordinatorResponse::default().with_host(s("host")),
                ),
            ]
        }
        ApiKey::Metadata => {
            let partition = |p: i32| {
                MetadataResponsePartition::default()
                    .with_partition_index(p)
                    .with_replica_nodes(two(1))
                    .with_isr_nodes(two(1))
                    .with_offline_replicas(two(3))
            };
            let topic = |n: &str| {
                MetadataResponseTopic::default()
                    .with_name(Some(TopicName(s(n))))
                    .with_partitions(vec![partition(0), partition(1)])
            };
            let broker = |id: i32| {
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(id))
                    .with_host(s("h"))
            };
            let r = MetadataResponse::default()
                .with_brokers(vec![broker(1), broker(2)])
                .with_topics(vec![topic("a"), topic("b")]);
            vec![
                ResponseKind::Metadata(r.clone().with_unknown_tagged_fields(tagged())),
                ResponseKind::Metadata(r),
            ]
        }
        ApiKey::JoinGroup => {
            let m = |id: &str| {
                JoinGroupResponseMember::default()
                    .with_member_id(s(id))
                    .with_metadata(Bytes::from_static(b"\x00\x03\x00\x00\x00\x01\x00\x01t"))
            };
            let r = JoinGroupResponse::default()
                .with_member_id(s("m"))
                .with_leader(s("m"))
                .with_members(vec![m("m"), m("n")]);
            vec![
                ResponseKind::JoinGroup(r.clone().with_unknown_tagged_fields(tagged())),
                ResponseKind::JoinGroup(r),
            ]
        }
        ApiKey::SyncGroup => {
            let r = SyncGroupResponse::default().with_assignment(assignment());
            vec![
                ResponseKind::SyncGroup(r.clone().with_unknown_tagged_fields(tagged())),
                ResponseKind::SyncGroup(r),
            ]
        }
        ApiKey::Heartbeat => vec![
            ResponseKind::Heartbeat(
                HeartbeatResponse::default().with_unknown_tagged_fields(tagged()),
            ),
            ResponseKind::Heartbeat(HeartbeatResponse::default()),
        ],
        ApiKey::LeaveGroup => {
            let m = |id: &str| MemberResponse::default().with_member_id(s(id));
            let r = LeaveGroupResponse::default().with_members(vec![m("a"), m("b")]);
            vec![
                ResponseKind::LeaveGroup(r.clone().with_unknown_tagged_fields(tagged())),
                ResponseKind::LeaveGroup(r),
                ResponseKind::LeaveGroup(LeaveGroupResponse::default()),
            ]
        }
        ApiKey::OffsetCommit => {
            let t = |n: &str| {
                OffsetCommitResponseTopic::default()
                    .with_name(TopicName(s(n)))
                    .with_partitions(vec![
                        OffsetCommitResponsePartition::default(),
                        OffsetCommitResponsePartition::default().with_partition_index(1),
                    ])
            };
            let r = OffsetCommitResponse::default().with_topics(vec![t("a"), t("b")]);
            vec![
                ResponseKind::OffsetCommit(r.clone().with_unknown_tagged_fields(tagged())),
                ResponseKind::OffsetCommit(r),
            ]
        }
        ApiKey::OffsetFetch => {
            let old = |n: &str| {
                OffsetFetchResponseTopic::default()
                    .with_name(TopicName(s(n)))
                    .with_partitions(vec![
                        OffsetFetchResponsePartition::default().with_metadata(Some(s("m"))),
                        OffsetFetchResponsePartition::default().with_partition_index(1),
                    ])
            };
            let new = |n: &str| {
                OffsetFetchResponseTopics::default()
                    .with_name(TopicName(s(n)))
                    .with_partitions(vec![
                        OffsetFetchResponsePartitions::default().with_metadata(Some(s("m"))),
                        OffsetFetchResponsePartitions::default().with_partition_index(1),
                    ])
            };
            let g = |id: &str| {
                OffsetFetchResponseGroup::default()
                    .with_group_id(kafka_protocol::messages::GroupId(s(id)))
                    .with_topics(vec![new("a"), new("b")])
            };
            let by_group = OffsetFetchResponse::default().with_groups(vec![g("g"), g("h")]);
            let by_topic = OffsetFetchResponse::default().with_topics(vec![old("a"), old("b")]);
            vec![
                ResponseKind::OffsetFetch(by_group.clone().with_unknown_tagged_fields(tagged())),
                ResponseKind::OffsetFetch(by_group),
                ResponseKind::OffsetFetch(by_topic.clone().with_unknown_tagged_fields(tagged())),
                ResponseKind::OffsetFetch(by_topic),
            ]
        }
        ApiKey::ConsumerGroupHeartbeat => {
            let t = |i: u128| {
                cgh::TopicPartitions::default()
                    .with_topic_id(Uuid::from_u128(i))
                    .with_partitions(vec![0, 1])
            };
            vec![ResponseKind::ConsumerGroupHeartbeat(
                ConsumerGroupHeartbeatResponse::default()
                    .with_member_id(Some(s("m")))
                    .with_assignment(Some(
                        cgh::Assignment::default().with_topic_partitions(vec![t(1), t(2)]),
                    ))
                    .with_unknown_tagged_fields(tagged()),
            )]
        }
        ApiKey::SaslHandshake => vec![ResponseKind::SaslHandshake(
            SaslHandshakeResponse::default().with_mechanisms(vec![s("PLAIN"), s("SCRAM")]),
        )],
        ApiKey::SaslAuthenticate => {
            let r = SaslAuthenticateResponse::default()
                .with_error_message(Some(s("e")))
                .with_auth_bytes(Bytes::from_static(b"abc"));
            vec![
                ResponseKind::SaslAuthenticate(r.clone().with_unknown_tagged_fields(tagged())),
                ResponseKind::SaslAuthenticate(r),
            ]
        }
        ApiKey::Fetch => {
            let partition = |p: i32| {
                fetch::PartitionData::default()
                    .with_partition_index(p)
                    .with_aborted_transactions(Some(vec![Default::default(), Default::default()]))
                    .with_records(Some(Bytes::from_static(b"records")))
            };
            let tagged_partition = |p: i32| {
                partition(p)
                    .with_preferred_read_replica(BrokerId(1))
                    .with_diverging_epoch(fetch::EpochEndOffset::default().with_epoch(1))
                    .with_current_leader(fetch::LeaderIdAndEpoch::default().with_leader_epoch(2))
                    .with_snapshot_id(fetch::SnapshotId::default().with_epoch(3))
                    .with_unknown_tagged_fields(tagged())
            };
            let topic = |n: &str, partition: &dyn Fn(i32) -> fetch::PartitionData| {
                fetch::FetchableTopicResponse::default()
                    .with_topic(TopicName(s(n)))
                    .with_topic_id(Uuid::from_u128(7))
                    .with_partitions(vec![partition(0), partition(1)])
            };
            let node = |id: i32| {
                fetch::NodeEndpoint::default()
                    .with_node_id(BrokerId(id))
                    .with_host(s("h"))
                    .with_rack(Some(s("r")))
            };
            let plain = FetchResponse::default()
                .with_responses(vec![topic("a", &partition), topic("b", &partition)]);
            let rich = FetchResponse::default()
                .with_responses(vec![
                    topic("a", &tagged_partition),
                    topic("b", &tagged_partition),
                ])
                .with_unknown_tagged_fields(tagged());
            vec![
                ResponseKind::Fetch(rich.clone().with_node_endpoints(vec![node(1), node(2)])),
                ResponseKind::Fetch(rich),
                ResponseKind::Fetch(plain),
            ]
        }
        ApiKey::ListOffsets => {
            let partition = |p: i32, epoch: i32| {
                list_offsets::ListOffsetsPartitionResponse::default()
                    .with_partition_index(p)
                    .with_leader_epoch(epoch)
            };
            let topics = |epoch: i32| {
                let topic = |n: &str| {
                    list_offsets::ListOffsetsTopicResponse::default()
                        .with_name(TopicName(s(n)))
                        .with_partitions(vec![partition(0, epoch), partition(1, epoch)])
                };
                ListOffsetsResponse::default().with_topics(vec![topic("a"), topic("b")])
            };
            vec![
                ResponseKind::ListOffsets(topics(3).with_unknown_tagged_fields(tagged())),
                ResponseKind::ListOffsets(topics(3)),
                ResponseKind::ListOffsets(topics(-1)),
            ]
        }
        ApiKey::Produce => {
            let error = |i: i32| {
                produce::BatchIndexAndErrorMessage::default()
                    .with_batch_index(i)
                    .with_batch_index_error_message(Some(s("e")))
            };
            let partition = |p: i32, rich: bool| {
                let plain = produce::PartitionProduceResponse::default().with_index(p);
                if !rich {
                    return plain;
                }
                plain
                    .with_record_errors(vec![error(0), error(1)])
                    .with_error_message(Some(s("m")))
                    .with_current_leader(produce::LeaderIdAndEpoch::default().with_leader_epoch(4))
                    .with_unknown_tagged_fields(tagged())
            };
            let topic = |n: &str, rich: bool| {
                produce::TopicProduceResponse::default()
                    .with_name(TopicName(s(n)))
                    .with_topic_id(Uuid::from_u128(9))
                    .with_partition_responses(vec![partition(0, rich), partition(1, rich)])
            };
            let node = |id: i32| produce::NodeEndpoint::default().with_node_id(BrokerId(id));
            let rich = ProduceResponse::default()
                .with_responses(vec![topic("a", true), topic("b", true)])
                .with_unknown_tagged_fields(tagged());
            vec![
                ResponseKind::Produce(rich.clone().with_node_endpoints(vec![node(1), node(2)])),
                ResponseKind::Produce(rich),
                ResponseKind::Produce(
                    ProduceResponse::default()
                        .with_responses(vec![topic("a", false), topic("b", false)]),
                ),
            ]
        }
        ApiKey::CreateTopics => {
            let config = |n: &str| {
                create_topics::CreatableTopicConfigs::default()
                    .with_name(s(n))
                    .with_value(Some(s("v")))
            };
            let topic = |n: &str, rich: bool| {
                let plain = create_topics::CreatableTopicResult::default()
                    .with_name(TopicName(s(n)))
                    .with_error_message(Some(s("e")));
                if !rich {
                    return plain;
                }
                plain
                    .with_topic_id(Uuid::from_u128(5))
                    .with_topic_config_error_code(1)
                    .with_configs(Some(vec![config("x"), config("y")]))
                    .with_unknown_tagged_fields(tagged())
            };
            vec![
                ResponseKind::CreateTopics(
                    CreateTopicsResponse::default()
                        .with_topics(vec![topic("a", true), topic("b", true)])
                        .with_unknown_tagged_fields(tagged()),
                ),
                ResponseKind::CreateTopics(
                    CreateTopicsResponse::default()
                        .with_topics(vec![topic("a", false), topic("b", false)]),
                ),
            ]
        }
        ApiKey::DescribeGroups => {
            let member = |id: &str| {
                describe_groups::DescribedGroupMember::default()
                    .with_member_id(s(id))
                    .with_group_instance_id(Some(s("i")))
                    .with_member_metadata(Bytes::from_static(b"md"))
                    .with_member_assignment(assignment())
            };
            let group = |g: &str| {
                describe_groups::DescribedGroup::default()
                    .with_group_id(GroupId(s(g)))
                    .with_group_state(s("Stable"))
                    .with_members(vec![member("m"), member("n")])
            };
            let r = DescribeGroupsResponse::default().with_groups(vec![group("g"), group("h")]);
            vec![
                ResponseKind::DescribeGroups(r.clone().with_unknown_tagged_fields(tagged())),
                ResponseKind::DescribeGroups(r),
            ]
        }
        ApiKey::ConsumerGroupDescribe => {
            let partitions = |t: &str| {
                cgd::TopicPartitions::default()
                    .with_topic_id(Uuid::from_u128(3))
                    .with_topic_name(TopicName(s(t)))
                    .with_partitions(vec![0, 1])
            };
            let assignment = cgd::Assignment::default()
                .with_topic_partitions(vec![partitions("a"), partitions("b")]);
            let member = |id: &str| {
                cgd::Member::default()
                    .with_member_id(s(id))
                    .with_rack_id(Some(s("r")))
                    .with_subscribed_topic_names(vec![TopicName(s("a")), TopicName(s("b"))])
                    .with_assignment(assignment.clone())
                    .with_target_assignment(assignment.clone())
            };
            let group = |g: &str| {
                cgd::DescribedGroup::default()
                    .with_group_id(GroupId(s(g)))
                    .with_members(vec![member("m"), member("n")])
            };
            vec![ResponseKind::ConsumerGroupDescribe(
                ConsumerGroupDescribeResponse::default()
                    .with_groups(vec![group("g"), group("h")])
                    .with_unknown_tagged_fields(tagged()),
            )]
        }
        ApiKey::IncrementalAlterConfigs => {
            use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
            let resource = |name: &str| {
                AlterConfigsResourceResponse::default()
                    .with_error_message(Some(s("refused")))
                    .with_resource_type(32)
                    .with_resource_name(s(name))
            };
            let r = IncrementalAlterConfigsResponse::default()
                .with_responses(vec![resource("g"), resource("h")]);
            vec![
                ResponseKind::IncrementalAlterConfigs(
                    r.clone().with_unknown_tagged_fields(tagged()),
                ),
                ResponseKind::IncrementalAlterConfigs(r),
            ]
        }
        ApiKey::ShareGroupHeartbeat => {
            use kafka_protocol::messages::share_group_heartbeat_response as sgh;
            let t = |i: u128| {
                sgh::TopicPartitions::default()
                    .with_topic_id(Uuid::from_u128(i))
                    .with_partitions(vec![0, 1])
            };
            vec![ResponseKind::ShareGroupHeartbeat(
                sgh::ShareGroupHeartbeatResponse::default()
                    .with_member_id(Some(s("m")))
                    .with_assignment(Some(
                        sgh::Assignment::default().with_topic_partitions(vec![t(1), t(2)]),
                    ))
                    .with_unknown_tagged_fields(tagged()),
            )]
        }
        ApiKey::ShareGroupDescribe => {
            use kafka_protocol::messages::share_group_describe_response as sgd;
            let partitions = |t: &str| {
                sgd::TopicPartitions::default()
                    .with_topic_id(Uuid::from_u128(3))
                    .with_topic_name(TopicName(s(t)))
                    .with_partitions(vec![0, 1])
            };
            let member = |id: &str| {
                sgd::Member::default()
                    .with_member_id(s(id))
                    .with_rack_id(Some(s("r")))
                    .with_subscribed_topic_names(vec![TopicName(s("a")), TopicName(s("b"))])
                    .with_assignment(
                        sgd::Assignment::default()
                            .with_topic_partitions(vec![partitions("a"), partitions("b")]),
                    )
            };
            let group = |g: &str| {
                sgd::DescribedGroup::default()
                    .with_group_id(GroupId(s(g)))
                    .with_members(vec![member("m"), member("n")])
            };
            vec![ResponseKind::ShareGroupDescribe(
                sgd::ShareGroupDescribeResponse::default()
                    .with_groups(vec![group("g"), group("h")])
                    .with_unknown_tagged_fields(tagged()),
            )]
        }
        ApiKey::ShareFetch => {
            use kafka_protocol::messages::share_fetch_response as sf;
            let acquired = |first: i64| {
                sf::AcquiredRecords::default()
                    .with_first_offset(first)
                    .with_last_offset(first + 9)
                    .with_delivery_count(1)
                    .with_unknown_tagged_fields(tagged())
            };
            let partition = |p: i32| {
                sf::PartitionData::default()
                    .with_partition_index(p)
                    .with_error_message(Some(s("e")))
                    .with_acknowledge_error_message(Some(s("a")))
                    .with_current_leader(
                        sf::LeaderIdAndEpoch::default()
                            .with_leader_id(2)
                            .with_unknown_tagged_fields(tagged()),
                    )
                    .with_records(Some(Bytes::from_static(b"records")))
                    .with_acquired_records(vec![acquired(0), acquired(10)])
                    .with_unknown_tagged_fields(tagged())
            };
            let topic = |i: u128| {
                sf::ShareFetchableTopicResponse::default()
                    .with_topic_id(Uuid::from_u128(i))
                    .with_partitions(vec![partition(0), partition(1)])
                    .with_unknown_tagged_fields(tagged())
            };
            let node = |id: i32| {
                sf::NodeEndpoint::default()
                    .with_node_id(BrokerId(id))
                    .with_host(s("h"))
                    .with_rack(Some(s("r")))
                    .with_unknown_tagged_fields(tagged())
            };
            vec![ResponseKind::ShareFetch(
                sf::ShareFetchResponse::default()
                    .with_error_message(Some(s("m")))
                    .with_responses(vec![topic(1), topic(2)])
                    .with_node_endpoints(vec![node(1), node(2)])
                    .with_unknown_tagged_fields(tagged()),
            )]
        }
        ApiKey::ShareAcknowledge => {
            use kafka_protocol::messages::share_acknowledge_response as sa;
            let partition = |p: i32| {
                sa::PartitionData::default()
                    .with_partition_index(p)
                    .with_error_message(Some(s("e")))
                    .with_current_leader(
                        sa::LeaderIdAndEpoch::default()
                            .with_leader_id(2)
                            .with_unknown_tagged_fields(tagged()),
                    )
                    .with_unknown_tagged_fields(tagged())
            };
            let topic = |i: u128| {
                sa::ShareAcknowledgeTopicResponse::default()
                    .with_topic_id(Uuid::from_u128(i))
                    .with_partitions(vec![partition(0), partition(1)])
                    .with_unknown_tagged_fields(tagged())
            };
            let node = |id: i32| {
                sa::NodeEndpoint::default()
                    .with_node_id(BrokerId(id))
                    .with_host(s("h"))
                    .with_rack(Some(s("r")))
                    .with_unknown_tagged_fields(tagged())
            };
            vec![ResponseKind::ShareAcknowledge(
                sa::ShareAcknowledgeResponse::default()
                    .with_error_message(Some(s("m")))
                    .with_responses(vec![topic(1), topic(2)])
                    .with_node_endpoints(vec![node(1), node(2)])
                    .with_unknown_tagged_fields(tagged()),
            )]
        }
        other => panic!("no sample for {other:?}"),
    }
}

/// Every response this crate's transport and members decode, then the ones it decodes for a
/// `Request::Raw`.
const DECODED: [ApiKey; 23] = [
    ApiKey::ApiVersions,
    ApiKey::SaslHandshake,
    ApiKey::SaslAuthenticate,
    ApiKey::FindCoordinator,
    ApiKey::Metadata,
    ApiKey::JoinGroup,
    ApiKey::SyncGroup,
    ApiKey::Heartbeat,
    ApiKey::LeaveGroup,
    ApiKey::OffsetCommit,
    ApiKey::OffsetFetch,
    ApiKey::ConsumerGroupHeartbeat,
    ApiKey::Fetch,
    ApiKey::ListOffsets,
    ApiKey::Produce,
    ApiKey::CreateTopics,
    ApiKey::DescribeGroups,
    ApiKey::ConsumerGroupDescribe,
    ApiKey::IncrementalAlterConfigs,
    ApiKey::ShareGroupHeartbeat,
    ApiKey::ShareGroupDescribe,
    ApiKey::ShareFetch,
    ApiKey::ShareAcknowledge,
];

#[test]
fn the_allocation_counter_sees_large_allocations() {
    let (largest, v) = largest_allocation(|| Vec::<u8>::with_capacity(1 << 20));
    assert!(largest >= 1 << 20, "{largest}");
    drop(v);
}

#[test]
fn forged_sizes_in_responses_allocate_in_proportion_to_the_bytes() {
    let mut decodes = 0usize;
    let mut worst = (0usize, 0usize, ApiKey::Heartbeat, 0i16);
    for api in DECODED {
        let samples = samples(api);
        let range = api.valid_versions();
        for v in range.min..=range.max {
            let Some(frame) = samples
                .iter()
                .find_map(|b| wire::encode_response(&b.clone().into(), api, v, 7).ok())
            else {
                panic!("no sample of {api:?} encodes at v{v}");
            };
            let frame = frame.freeze();
            assert!(
                wire::decode_response(frame.slice(4..), api, v).is_ok(),
                "{api:?} v{v}"
            );
            for bytes in forgeries(&frame[4..]) {
                let input = Bytes::from(bytes);
                let n = input.len();
                let (largest, _) = largest_allocation(move || wire::decode_response(input, api, v));
                decodes += 1;
                assert!(
                    largest <= bound(n),
                    "{api:?} v{v}: decoding {n} bytes allocated {largest} bytes at once"
                );
                if largest * worst.1.max(1) > worst.0 * n.max(1) {
                    worst = (largest, n, api, v);
                }
            }
        }
    }
    eprintln!(
        "{decodes} forged responses decoded; largest allocation per input byte: {} bytes for {} bytes ({:?} v{})",
        worst.0, worst.1, worst.2, worst.3
    );
}

/// StreamsGroupHeartbeat answers with two elements in every array and unknown tagged fields:
/// the v1 fields set (encodes at v1 only), then the v0 one (encodes at v0 only).
fn streams_heartbeat_samples() -> Vec<ResponseBody> {
    let tasks = || {
        (0..2)
            .map(|i| {
                sgh::TaskIds::default()
                    .with_subtopology_id(s(&format!("s{i}")))
                    .with_partitions(vec![0, 1])
                    .with_unknown_tagged_fields(tagged())
            })
            .collect::<Vec<_>>()
    };
    let partitions = || {
        (0..2)
            .map(|i| {
                sgh::TopicPartition::default()
                    .with_topic(TopicName(s(&format!("t{i}"))))
                    .with_partitions(vec![0, 1])
            })
            .collect::<Vec<_>>()
    };
    let base = StreamsGroupHeartbeatResponse::default()
        .with_unknown_tagged_fields(tagged())
        .with_error_message(Some(s("why")))
        .with_member_id(s("member"))
        .with_member_epoch(3)
        .with_heartbeat_interval_ms(5000)
        .with_status(Some(
            (0..2)
                .map(|i| {
                    sgh::Status::default()
                        .with_status_code(i)
                        .with_status_detail(s("detail"))
                })
                .collect(),
        ))
        .with_active_tasks(Some(tasks()))
        .with_standby_tasks(Some(tasks()))
        .with_warmup_tasks(Some(tasks()))
        .with_endpoint_information_epoch(2)
        .with_partitions_by_user_endpoint(Some(
            (0..2)
                .map(|i| {
                    sgh::EndpointToPartitions::default()
                        .with_user_endpoint(
                            sgh::Endpoint::default()
                                .with_host(s(&format!("h{i}")))
                                .with_port(9000),
                        )
                        .with_active_partitions(partitions())
                        .with_standby_partitions(partitions())
                })
                .collect(),
        ));
    vec![
        ResponseBody::StreamsGroupHeartbeat(
            base.clone()
                .with_acceptable_recovery_lag(100)
                .with_topology_description_required(true),
        ),
        ResponseBody::StreamsGroupHeartbeat(base.with_acceptable_recovery_lag_legacy(100)),
    ]
}

/// StreamsGroupDescribe answers, two elements in every array: with a topology description
/// (v1), then without (v0).
fn streams_describe_samples() -> Vec<ResponseBody> {
    let kv = || {
        (0..2)
            .map(|i| {
                sgd::KeyValue::default()
                    .with_key(s(&format!("k{i}")))
                    .with_value(s("v"))
            })
            .collect::<Vec<_>>()
    };
    let topics = || vec![TopicName(s("a")), TopicName(s("b"))];
    let tasks = || {
        (0..2)
            .map(|i| {
                sgd::TaskIds::default()
                    .with_subtopology_id(s(&format!("s{i}")))
                    .with_partitions(vec![0, 1])
            })
            .collect::<Vec<_>>()
    };
    let assignment = || {
        sgd::Assignment::default()
            .with_active_tasks(tasks())
            .with_standby_tasks(tasks())
            .with_warmup_tasks(tasks())
    };
    let offsets = || {
        (0..2)
            .map(|i| {
                sgd::TaskOffset::default()
                    .with_subtopology_id(s("s0"))
                    .with_partition(i)
                    .with_offset(10)
            })
            .collect::<Vec<_>>()
    };
    let info = || {
        (0..2)
            .map(|i| {
                sgd::TopicInfo::default()
                    .with_name(TopicName(s(&format!("c{i}"))))
                    .with_partitions(2)
                    .with_topic_configs(kv())
            })
            .collect::<Vec<_>>()
    };
    let node = |name: &str| {
        sgd::TopologyDescriptionNode::default()
            .with_name(s(name))
            .with_source_topics(topics())
            .with_sink_topic(Some(TopicName(s("out"))))
            .with_stores(vec![s("st0"), s("st1")])
            .with_successors(vec![s("n1"), s("n2")])
    };
    let group = sgd::DescribedGroup::default()
        .with_unknown_tagged_fields(tagged())
        .with_group_id(GroupId(s("app")))
        .with_group_state(s("Stable"))
        .with_group_epoch(4)
        .with_topology(Some(
            sgd::Topology::default()
                .with_epoch(1)
                .with_subtopologies(Some(
                    (0..2)
                        .map(|i| {
                            sgd::Subtopology::default()
                                .with_subtopology_id(s(&format!("s{i}")))
                                .with_source_topics(topics())
                                .with_repartition_sink_topics(topics())
                                .with_state_changelog_topics(info())
                                .with_repartition_source_topics(info())
                        })
                        .collect(),
                )),
        ))
        .with_members(
            (0..2)
                .map(|i| {
                    sgd::Member::default()
                        .with_member_id(s(&format!("m{i}")))
                        .with_instance_id(Some(s("i")))
                        .with_user_endpoint(Some(
                            sgd::Endpoint::default().with_host(s("h")).with_port(1),
                        ))
                        .with_client_tags(kv())
                        .with_task_offsets(offsets())
                        .with_task_end_offsets(offsets())
                        .with_assignment(assignment())
                        .with_target_assignment(assignment())
                })
                .collect(),
        );
    let described = sgd::TopologyDescription::default()
        .with_subtopologies(
            (0..2)
                .map(|i| {
                    sgd::TopologyDescriptionSubtopology::default()
                        .with_subtopology_id(s(&format!("s{i}")))
                        .with_nodes(vec![node("n1"), node("n2")])
                })
                .collect(),
        )
        .with_global_stores(
            (0..2)
                .map(|_| {
                    sgd::TopologyDescriptionGlobalStore::default()
                        .with_source(node("src"))
                        .with_processor(node("proc"))
                })
                .collect(),
        );
    let answer = |g: sgd::DescribedGroup| {
        ResponseBody::StreamsGroupDescribe(
            StreamsGroupDescribeResponse::default()
                .with_unknown_tagged_fields(tagged())
                .with_groups(vec![g.clone(), g]),
        )
    };
    vec![
        answer(
            group
                .clone()
                .with_topology_description(Some(described))
                .with_assignor_name(Some(s("sticky"))),
        ),
        answer(group),
    ]
}

/// StreamsGroupTopologyDescriptionUpdate answers (KIP-1331): the error message and unknown
/// tagged fields are the sizes to forge.
fn streams_update_samples() -> Vec<ResponseBody> {
    vec![ResponseBody::StreamsGroupTopologyDescriptionUpdate(
        StreamsGroupTopologyDescriptionUpdateResponse::default()
            .with_throttle_time_ms(3)
            .with_error_code(135)
            .with_error_message(Some(s("the plugin could not store the description")))
            .with_unknown_tagged_fields(tagged()),
    )]
}

#[test]
fn forged_sizes_in_streams_group_answers_allocate_in_proportion_to_the_bytes() {
    // The generated decoders of `consumer_membership::messages` are not walked by the size
    // layouts: they check every count and length against the bytes left themselves.
    for (api, samples) in [
        (Api::STREAMS_GROUP_HEARTBEAT, streams_heartbeat_samples()),
        (Api::STREAMS_GROUP_DESCRIBE, streams_describe_samples()),
        (
            Api::STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE,
            streams_update_samples(),
        ),
    ] {
        for v in api.versions() {
            let Some(frame) = samples
                .iter()
                .find_map(|b| wire::encode_response(b, api, v, 7).ok())
            else {
                panic!("no sample of {api:?} encodes at v{v}");
            };
            let frame = frame.freeze();
            let decoded = wire::decode_response(frame.slice(4..), api, v).expect("decodes");
            assert!(samples.contains(&decoded.body), "{api:?} v{v} round-trips");
            let mut refused = 0;
            for bytes in forgeries(&frame[4..]) {
                let input = Bytes::from(bytes);
                let n = input.len();
                let (largest, r) = largest_allocation(move || wire::decode_response(input, api, v));
                assert!(
                    largest <= bound(n),
                    "{api:?} v{v}: decoding {n} bytes allocated {largest} bytes at once"
                );
                refused += usize::from(r.is_err());
            }
            assert!(refused > 0, "{api:?} v{v}: no forgery was refused");
        }
    }
}

#[test]
fn a_forged_count_in_a_streams_group_heartbeat_answer_is_a_decode_error() {
    // A v1 answer whose `Status` array claims 2^32 - 2 elements in the few bytes after it.
    let mut frame = vec![0, 0, 0, 7, 0]; // correlation id, header tagged fields (header v1)
    frame.extend_from_slice(&[0; 4]); // throttle_time_ms
    frame.extend_from_slice(&[0; 2]); // error_code
    frame.push(0); // error_message: null
    frame.push(1); // member_id: ""
    frame.extend_from_slice(&[0; 4 * 3]); // member_epoch, heartbeat_interval_ms, task_offset_interval_ms
    frame.extend_from_slice(&[0; 8]); // acceptable_recovery_lag
    frame.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]); // status: compact array count
    frame.extend_from_slice(&[0; 16]);
    let (largest, r) = largest_allocation(|| {
        wire::decode_response(Bytes::from(frame), Api::STREAMS_GROUP_HEARTBEAT, 1)
    });
    assert!(
        matches!(&r, Err(TransportError::Decode { api, version: 1, reason })
            if *api == Api::STREAMS_GROUP_HEARTBEAT && reason.contains("compact array")),
        "{r:?}"
    );
    assert!(
        largest < 4096,
        "allocated {largest} bytes for a forged count"
    );
    // A forged string length: an error too, nothing allocated for it.
    let mut frame = vec![0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0];
    frame.extend_from_slice(&[0xfe, 0xff, 0xff, 0xff, 0x07]); // error_message length
    let (largest, r) = largest_allocation(|| {
        wire::decode_response(Bytes::from(frame), Api::STREAMS_GROUP_HEARTBEAT, 0)
    });
    assert!(matches!(&r, Err(TransportError::Decode { .. })), "{r:?}");
    assert!(
        largest < 4096,
        "allocated {largest} bytes for a forged length"
    );
}

#[test]
fn forged_sizes_in_subscription_and_assignment_bytes_are_bounded() {
    let subscription = Subscription {
        topics: vec!["a".into(), "b".into()],
        user_data: Some(Bytes::from_static(b"ud")),
        owned_partitions: vec![tp("a", 0), tp("a", 1), tp("b", 0)],
        generation_id: 3,
        rack_id: Some("r".into()),
    }
    .encode();
    let assignment = assignment();
    for version in [0i16, 1, 2, 3, 4] {
        for base in [&subscription, &assignment] {
            let mut b = base.to_vec();
            b[..2].copy_from_slice(&version.to_be_bytes());
            for bytes in forgeries(&b) {
                let n = bytes.len();
                let (largest, _) = largest_allocation(|| {
                    (
                        Subscription::decode(&bytes).is_ok(),
                        Assignment::decode(&bytes).is_ok(),
                    )
                });
                assert!(
                    largest <= bound(n),
                    "v{version}: decoding {n} bytes allocated {largest} bytes at once"
                );
            }
        }
    }
}

// ------------------------------------------------------------ large, well-formed bytes

use consumer_membership::GroupProtocol;
use consumer_membership::config::GroupConfig;
use consumer_membership::machine::Machine;
use consumer_membership::machine::classic::ClassicMember;
use consumer_membership::machine::consumer::ConsumerMember;
use consumer_membership::machine::events::{Event, MemberState, Reason};
use consumer_membership::machine::streams::{
    StreamsConfig, StreamsEvent, StreamsMember, StreamsProcess, StreamsTopology, Subtopology,
};
use consumer_membership::request::{Outbound, Response};
use kafka_protocol::messages::metadata_response::MetadataResponseTopic as MdTopic;
use std::time::{Duration, Instant};

/// A legal topic name of `len` (>= 8) characters, distinct for each `seed`.
fn long_name(len: usize, seed: usize) -> Vec<u8> {
    let mut n = format!("{seed:08}").into_bytes();
    n.resize(len, b't');
    n
}

/// (name, partitions 0..count) runs as the classic protocol writes them.
fn put_runs(b: &mut Vec<u8>, runs: &[(Vec<u8>, i32)]) {
    b.extend_from_slice(&(runs.len() as i32).to_be_bytes());
    for (name, count) in runs {
        b.extend_from_slice(&(name.len() as i16).to_be_bytes());
        b.extend_from_slice(name);
        b.extend_from_slice(&count.to_be_bytes());
        for p in 0..*count {
            b.extend_from_slice(&p.to_be_bytes());
        }
    }
}

/// Version-3 assignment bytes assigning `runs`.
fn assignment_bytes(runs: &[(Vec<u8>, i32)]) -> Bytes {
    let mut b = vec![0, 3];
    put_runs(&mut b, runs);
    b.extend_from_slice(&(-1i32).to_be_bytes()); // user data: null
    Bytes::from(b)
}

/// Version-3 subscription bytes: `topics`, owning `owned`.
fn subscription_bytes(topics: &[Vec<u8>], owned: &[(Vec<u8>, i32)]) -> Bytes {
    let mut b = vec![0, 3];
    b.extend_from_slice(&(topics.len() as i32).to_be_bytes());
    for t in topics {
        b.extend_from_slice(&(t.len() as i16).to_be_bytes());
        b.extend_from_slice(t);
    }
    b.extend_from_slice(&(-1i32).to_be_bytes()); // user data: null
    put_runs(&mut b, owned);
    b.extend_from_slice(&1i32.to_be_bytes()); // generation id
    b.extend_from_slice(&0i16.to_be_bytes()); // rack id: ""
    Bytes::from(b)
}

/// Allowed live for what `n` bytes decode to: a few words per 4-byte partition id.
fn live_bound(n: usize) -> usize {
    64 * 1024 + 10 * n
}

#[test]
fn large_member_written_bytes_decode_in_proportion_to_their_size() {
    let max = vec![b'x'; 32767];
    let name = long_name(249, 0);
    let many: Vec<(Vec<u8>, i32)> = (0..1000).map(|i| (long_name(249, i), 100)).collect();
    let names: Vec<Vec<u8>> = (0..1000).map(|i| long_name(249, i)).collect();
    let cases: Vec<(&str, Bytes, bool)> = vec![
        (
            "assignment: a 32767-byte name, 10k partitions",
            assignment_bytes(&[(max.clone(), 10_000)]),
            false,
        ),
        (
            "assignment: a 249-character name, 100k partitions",
            assignment_bytes(&[(name.clone(), 100_000)]),
            true,
        ),
        (
            "assignment: 1000 topics of 100 partitions",
            assignment_bytes(&many),
            true,
        ),
        (
            "subscription: a 32767-byte name, 10k owned partitions",
            subscription_bytes(std::slice::from_ref(&max), &[(max.clone(), 10_000)]),
            false,
        ),
        (
            "subscription: 1000 topics, 100k owned partitions of one",
            subscription_bytes(&names, &[(name.clone(), 100_000)]),
            true,
        ),
    ];
    for (what, bytes, valid) in cases {
        let n = bytes.len();
        let (peak, ok) = if what.starts_with("assignment") {
            peak_live(|| Assignment::decode(&bytes).map(|a| a.partitions.len()))
        } else {
            peak_live(|| Subscription::decode(&bytes).map(|s| s.owned_partitions.len()))
        };
        eprintln!("{what}: {n} bytes, peak live {peak} bytes, {ok:?}");
        assert!(
            peak <= live_bound(n),
            "{what}: {n} bytes held {peak} bytes live"
        );
        assert_eq!(ok.is_ok(), valid, "{what}: {ok:?}");
    }
    // A name Kafka cannot have is a typed error.
    assert!(matches!(
        Assignment::decode(&assignment_bytes(&[(b"a b".to_vec(), 1)])),
        Err(
            consumer_membership::machine::classic::subscription::ProtocolError::InvalidTopic { .. }
        )
    ));
}

/// Answers the requests `m` has queued with `answer` (requests it returns `None` for stay
/// unanswered), until it has none; returns the events.
fn drive<M: Machine>(
    m: &mut M,
    now: Instant,
    answer: &mut dyn FnMut(&Outbound) -> Option<ResponseBody>,
) -> Vec<M::Event> {
    let mut events = Vec::new();
    for _ in 0..20 {
        let mut out = Vec::new();
        while let Some(o) = m.poll_request() {
            out.push(o);
        }
        while let Some(e) = m.poll_event() {
            events.push(e);
        }
        let mut answered = false;
        for o in &out {
            if let Some(body) = answer(o) {
                let version = *o.request.versions().end();
                m.handle_response(o.id, Ok(Response { version, body }), now);
                answered = true;
            }
        }
        if !answered {
            break;
        }
    }
    while let Some(e) = m.poll_event() {
        events.push(e);
    }
    events
}

fn group_config(protocol: GroupProtocol) -> GroupConfig {
    let mut c = GroupConfig::new("g");
    c.protocol = protocol;
    c.session_timeout = Duration::from_secs(10);
    c.heartbeat_interval = Duration::from_secs(1);
    c.seed = Some(1);
    c
}

fn coordinator_answer(key: &str) -> ResponseBody {
    let c = Coordinator::default()
        .with_key(s(key))
        .with_node_id(BrokerId(1))
        .with_host(s("h"))
        .with_port(9092);
    ResponseBody::Kafka(ResponseKind::FindCoordinator(
        FindCoordinatorResponse::default().with_coordinators(vec![c]),
    ))
}

fn metadata_answer(topics: &[(&[u8], Uuid, i32)]) -> ResponseBody {
    let mut answer = Vec::new();
    for &(name, id, n) in topics {
        let name = TopicName(s(std::str::from_utf8(name).unwrap()));
        let partitions =
            (0..n).map(|p| MetadataResponsePartition::default().with_partition_index(p));
        answer.push(
            MdTopic::default()
                .with_name(Some(name))
                .with_topic_id(id)
                .with_partitions(partitions.collect()),
        );
    }
    let topics = answer;
    ResponseBody::Kafka(ResponseKind::Metadata(
        MetadataResponse::default().with_topics(topics),
    ))
}

fn is(o: &Outbound, key: ApiKey) -> bool {
    o.request.api_key() == key
}

fn running(events: &[Event]) -> bool {
    !events.iter().any(|e| matches!(e, Event::Fatal(_)))
}

#[test]
fn a_classic_leader_bounds_what_forged_member_metadata_decodes_to() {
    let name = long_name(249, 0);
    let forged = subscription_bytes(&[vec![b'x'; 32767]], &[(vec![b'x'; 32767], 10_000)]);
    let large = subscription_bytes(std::slice::from_ref(&name), &[(name.clone(), 100_000)]);
    let own = subscription_bytes(&[b"t".to_vec()], &[]);
    let input = forged.len() + large.len() + own.len();
    let member = |id: &str, metadata: &Bytes| {
        JoinGroupResponseMember::default()
            .with_member_id(s(id))
            .with_metadata(metadata.clone())
    };
    let join = JoinGroupResponse::default()
        .with_generation_id(1)
        .with_protocol_type(Some(s("consumer")))
        .with_protocol_name(Some(s("range")))
        .with_leader(s("m0"))
        .with_member_id(s("m0"))
        .with_members(vec![
            member("m0", &own),
            member("forged", &forged),
            member("large", &large),
        ]);
    let mut synced = false;
    let (peak, events, _) = classic_group(&join, &mut |o| {
        if is(o, ApiKey::Metadata) {
            Some(metadata_answer(&[
                (b"t", Uuid::nil(), 3),
                (&name, Uuid::nil(), 4),
            ]))
        } else {
            synced |= is(o, ApiKey::SyncGroup);
            None
        }
    });
    eprintln!("classic leader: {input} bytes of member metadata, peak live {peak} bytes");
    assert!(synced, "the leader assigns: {events:#?}");
    assert!(running(&events), "{events:#?}");
    assert!(
        peak <= live_bound(input) + 1024 * 1024,
        "the leader held {peak} bytes live for {input} bytes of metadata"
    );
}

/// A classic follower fed `assignment` in SyncGroup: its peak live bytes and events.
fn follower_syncs(assignment: &Bytes) -> (usize, Vec<Event>, ClassicMember) {
    let join = JoinGroupResponse::default()
        .with_generation_id(1)
        .with_protocol_type(Some(s("consumer")))
        .with_protocol_name(Some(s("range")))
        .with_leader(s("leader"))
        .with_member_id(s("m1"));
    let sync = SyncGroupResponse::default()
        .with_protocol_type(Some(s("consumer")))
        .with_protocol_name(Some(s("range")))
        .with_assignment(assignment.clone());
    let mut syncs = 0;
    classic_group(&join, &mut |o| {
        (is(o, ApiKey::SyncGroup) && syncs == 0).then(|| {
            syncs += 1;
            ResponseBody::Kafka(ResponseKind::SyncGroup(sync.clone()))
        })
    })
}

/// A classic member subscribed to `t`, driven through `join` with `other` answering the
/// requests after it: its peak live bytes, events, and the member.
fn classic_group(
    join: &JoinGroupResponse,
    other: &mut dyn FnMut(&Outbound) -> Option<ResponseBody>,
) -> (usize, Vec<Event>, ClassicMember) {
    let now = Instant::now();
    let mut m = ClassicMember::new(group_config(GroupProtocol::Classic), now).unwrap();
    m.subscribe(["t".to_owned()], now).unwrap();
    let (peak, events) = peak_live(|| {
        drive(&mut m, now, &mut |o| {
            if is(o, ApiKey::FindCoordinator) {
                Some(coordinator_answer("g"))
            } else if is(o, ApiKey::JoinGroup) {
                Some(ResponseBody::Kafka(ResponseKind::JoinGroup(join.clone())))
            } else {
                other(o)
            }
        })
    });
    (peak, events, m)
}

#[test]
fn a_classic_follower_bounds_what_a_forged_assignment_decodes_to() {
    // A name no topic can have: refused, the member rejoins.
    let forged = assignment_bytes(&[(vec![b'x'; 32767], 10_000)]);
    let (peak, events, m) = follower_syncs(&forged);
    eprintln!(
        "classic follower, forged: {} bytes, peak live {peak} bytes",
        forged.len()
    );
    assert!(running(&events), "{events:#?}");
    assert!(
        events.iter().any(|e| matches!(
            e,
            Event::StateChanged {
                reason: Reason::InvalidAssignment,
                ..
            }
        )),
        "{events:#?}"
    );
    assert_ne!(m.state(), MemberState::Fatal);
    assert!(peak <= live_bound(forged.len()), "held {peak} bytes live");
    // Large and valid: assigned, in proportion (the event lists what was added and what is
    // owned, the member keeps what it owns: a few words per partition each).
    let large = assignment_bytes(&[(long_name(249, 0), 100_000)]);
    let (peak, events, m) = follower_syncs(&large);
    eprintln!(
        "classic follower, large: {} bytes, peak live {peak} bytes",
        large.len()
    );
    assert!(running(&events), "{events:#?}");
    assert_eq!(m.state(), MemberState::Stable);
    assert!(
        peak <= 40 * large.len(),
        "held {peak} bytes live for {} bytes",
        large.len()
    );
}

#[test]
fn a_kip848_member_bounds_what_a_huge_assignment_becomes() {
    let id = Uuid::from_u128(7);
    let name = long_name(249, 0);
    let count = 250_000;
    let target = cgh::Assignment::default().with_topic_partitions(vec![
        cgh::TopicPartitions::default()
            .with_topic_id(id)
            .with_partitions((0..count).collect()),
    ]);
    let input = 4 * count as usize;
    let now = Instant::now();
    let mut m = ConsumerMember::new(group_config(GroupProtocol::Consumer), now).unwrap();
    m.subscribe([String::from_utf8(name.clone()).unwrap()], now)
        .unwrap();
    let member_id = m.member_id().to_owned();
    let mut answered = 0;
    let (peak, events) = peak_live(|| {
        drive(&mut m, now, &mut |o| {
            if is(o, ApiKey::FindCoordinator) {
                Some(coordinator_answer("g"))
            } else if is(o, ApiKey::Metadata) {
                Some(metadata_answer(&[(&name, id, count)]))
            } else if is(o, ApiKey::ConsumerGroupHeartbeat) && answered == 0 {
                answered += 1;
                Some(ResponseBody::Kafka(ResponseKind::ConsumerGroupHeartbeat(
                    ConsumerGroupHeartbeatResponse::default()
                        .with_member_id(Some(s(&member_id)))
                        .with_member_epoch(1)
                        .with_heartbeat_interval_ms(1000)
                        .with_assignment(Some(target.clone())),
                )))
            } else {
                None
            }
        })
    });
    eprintln!("KIP-848 member: {input} bytes of partition ids, peak live {peak} bytes");
    assert!(running(&events), "{events:#?}");
    assert_eq!(m.assignment().len(), count as usize);
    assert!(
        peak <= 64 * input,
        "held {peak} bytes live for {input} bytes of partition ids"
    );
}

#[test]
fn a_streams_member_checks_subtopology_ids_before_expanding_tasks() {
    let topology = StreamsTopology::new(1, vec![Subtopology::new("0", ["in"])]);
    let tasks = |sub: &str, n: i32| {
        vec![
            sgh::TaskIds::default()
                .with_subtopology_id(s(sub))
                .with_partitions((0..n).collect()),
        ]
    };
    let unknown = "x".repeat(32767);
    let answer = sgh::StreamsGroupHeartbeatResponse::default()
        .with_member_epoch(1)
        .with_heartbeat_interval_ms(1000)
        .with_active_tasks(Some(tasks(&unknown, 10_000)))
        .with_standby_tasks(Some(Vec::new()))
        .with_warmup_tasks(Some(Vec::new()));
    let input = 32767 + 4 * 10_000;
    let now = Instant::now();
    let mut m = StreamsMember::new(
        group_config(GroupProtocol::Consumer),
        StreamsConfig::new(topology),
        StreamsProcess::new("p", None),
        now,
    )
    .unwrap();
    m.join(now).unwrap();
    let mut answered = 0;
    let (peak, events) = peak_live(|| {
        drive(&mut m, now, &mut |o| {
            if is(o, ApiKey::FindCoordinator) {
                Some(coordinator_answer("g"))
            } else if o.request.api_key() == Api::STREAMS_GROUP_HEARTBEAT && answered == 0 {
                answered += 1;
                Some(ResponseBody::StreamsGroupHeartbeat(answer.clone()))
            } else {
                None
            }
        })
    });
    eprintln!("streams member, unknown subtopology: {input} bytes, peak live {peak} bytes");
    // Tasks of a subtopology the member does not have: refused, decided before a task is made
    // of each partition (the unknown id is kept once, not once per partition).
    assert!(
        events.iter().any(|e| matches!(
            e,
            StreamsEvent::TasksRefused { refused } if refused.active[&unknown].len() == 10_000
        )),
        "{events:#?}"
    );
    assert!(m.tasks().is_empty());
    assert!(peak <= live_bound(input), "held {peak} bytes live");
}
