//! Just enough of Kafka's data path for the examples and tests: partition leaders from
//! Metadata, ListOffsets (earliest / latest), Fetch v12 (topic names; v13+ would need topic ids)
//! with uncompressed record batches decoded, and Produce of uncompressed batches.
//!
//! Everything goes through this crate's [`Transport`] (a `TcpTransport` in practice), so the
//! negotiated versions, timeouts and typed transport errors are the membership code's own.
//! Malformed answers are typed [`DataError`]s, never panics; a compressed batch is
//! [`DataError::Compressed`] (kafka-protocol is built without its compression features).
//!
//! Shared by `#[path = "common/fetch.rs"] mod fetch;` (examples) and
//! `#[path = "../examples/common/fetch.rs"] mod fetch;` (tests).

// Each includer uses a different part.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use consumer_membership::error::{TransportError, error_name};
use consumer_membership::machine::TopicPartition;
use consumer_membership::request::{Broker, Request, Response, ResponseBody, Target};
use consumer_membership::transport::Transport;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, ListOffsetsRequest, ProduceRequest, RequestKind, ResponseKind,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// Fetch v12: the last version that names topics (v13+ use topic ids, KIP-516).
pub const FETCH_VERSIONS: RangeInclusive<i16> = 12..=12;
/// ListOffsets v2 (isolation level) to v9 (v10 adds a timeout for tiered storage).
pub const LIST_OFFSETS_VERSIONS: RangeInclusive<i16> = 2..=9;
/// Produce v3 (record batches v2) to v12 (v13 uses topic ids).
pub const PRODUCE_VERSIONS: RangeInclusive<i16> = 3..=12;

/// Size of a v2 record batch header: base offset, length, leader epoch, magic, CRC,
/// attributes, last offset delta, first and max timestamps, producer id and epoch, base
/// sequence, record count.
const BATCH_HEADER: usize = 61;
/// The smallest encoded record: length, attributes, timestamp delta, offset delta, key length,
/// value length and header count, one byte each.
const MIN_RECORD: usize = 7;

/// Why a data-path request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DataError {
    /// The request did not get an answer.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The broker answered with a Kafka error code.
    #[error("{api:?}{}: error {code} ({name}){}", at(.partition), detail(.message), name = error_name(*.code))]
    Kafka {
        /// The API.
        api: ApiKey,
        /// The partition, when the error is per partition.
        partition: Option<TopicPartition>,
        /// The error code.
        code: i16,
        /// The broker's error message, when it sent one.
        message: Option<String>,
    },
    /// Metadata names no live leader for the partition.
    #[error("no leader known for {0}")]
    NoLeader(TopicPartition),
    /// A batch is compressed; this helper is built without compression codecs.
    #[error(
        "{partition}: record batch at offset {base_offset} is {codec:?}-compressed; only uncompressed batches are supported"
    )]
    Compressed {
        /// The partition.
        partition: TopicPartition,
        /// The batch's base offset.
        base_offset: i64,
        /// The codec.
        codec: Compression,
    },
    /// The answer does not make sense (wrong response type, a batch that does not decode, ...).
    #[error("invalid {api:?} answer{}: {reason}", at(.partition))]
    Invalid {
        /// The API.
        api: ApiKey,
        /// The partition, when known.
        partition: Option<TopicPartition>,
        /// What is wrong.
        reason: String,
    },
}

fn detail(message: &Option<String>) -> String {
    message
        .as_ref()
        .map_or_else(String::new, |m| format!(": {m}"))
}

fn at(partition: &Option<TopicPartition>) -> String {
    partition
        .as_ref()
        .map_or_else(String::new, |tp| format!(" for {tp}"))
}

/// Kafka error codes after which partition leadership should be looked up again.
const STALE_METADATA: &[i16] = &[
    3,   // UNKNOWN_TOPIC_OR_PARTITION
    5,   // LEADER_NOT_AVAILABLE
    6,   // NOT_LEADER_OR_FOLLOWER
    74,  // FENCED_LEADER_EPOCH
    75,  // UNKNOWN_LEADER_EPOCH
    100, // UNKNOWN_TOPIC_ID
    103, // OFFSET_NOT_AVAILABLE
];

/// OFFSET_OUT_OF_RANGE.
pub const OFFSET_OUT_OF_RANGE: i16 = 1;

impl DataError {
    /// The Kafka error code, if the broker sent one.
    pub fn code(&self) -> Option<i16> {
        match self {
            DataError::Kafka { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the partition's leader should be looked up again before retrying.
    pub fn needs_metadata(&self) -> bool {
        match self {
            DataError::Transport(_) | DataError::NoLeader(_) => true,
            DataError::Kafka { code, .. } => STALE_METADATA.contains(code),
            _ => false,
        }
    }

    fn invalid(api: ApiKey, partition: Option<&TopicPartition>, reason: impl Into<String>) -> Self {
        DataError::Invalid {
            api,
            partition: partition.cloned(),
            reason: reason.into(),
        }
    }
}

// ------------------------------------------------------------------------------- metadata

/// Partition leaders of some topics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leaders {
    /// Brokers by node id.
    pub brokers: BTreeMap<i32, Broker>,
    /// Each partition's leader node id (`None`: no leader right now).
    pub partitions: BTreeMap<TopicPartition, Option<i32>>,
    /// Topics the broker answered with an error code (e.g. 3 UNKNOWN_TOPIC_OR_PARTITION).
    pub topic_errors: BTreeMap<String, i16>,
}

impl Leaders {
    /// The leader of `tp`.
    pub fn leader(&self, tp: &TopicPartition) -> Result<&Broker, DataError> {
        if let Some(&code) = self.topic_errors.get(tp.topic()) {
            return Err(DataError::Kafka {
                api: ApiKey::Metadata,
                partition: Some(tp.clone()),
                code,
                message: None,
            });
        }
        self.partitions
            .get(tp)
            .copied()
            .flatten()
            .and_then(|id| self.brokers.get(&id))
            .ok_or_else(|| DataError::NoLeader(tp.clone()))
    }

    /// The partition indexes of `topic`, sorted.
    pub fn partitions_of(&self, topic: &str) -> Vec<i32> {
        self.partitions
            .keys()
            .filter(|tp| tp.topic() == topic)
            .map(|tp| tp.partition)
            .collect()
    }
}

/// Looks up the leaders of `topics` (Metadata v12+ to any bootstrap broker; topics are not
/// auto-created).
pub async fn leaders<T: Transport>(
    transport: &T,
    topics: &[String],
    timeout: Duration,
) -> Result<Leaders, DataError> {
    let response = transport
        .send(
            Target::Bootstrap,
            Request::Metadata {
                topics: Some(topics.to_vec()),
                allow_auto_topic_creation: false,
            },
            timeout,
        )
        .await?;
    leaders_from(&response)
}

/// Reads the leaders out of a Metadata answer.
pub fn leaders_from(response: &Response) -> Result<Leaders, DataError> {
    let ResponseBody::Kafka(ResponseKind::Metadata(r)) = &response.body else {
        return Err(DataError::invalid(
            ApiKey::Metadata,
            None,
            "not a Metadata response",
        ));
    };
    let mut out = Leaders::default();
    for b in &r.brokers {
        let port = u16::try_from(b.port)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| {
                DataError::invalid(
                    ApiKey::Metadata,
                    None,
                    format!("broker {} has port {}", b.node_id.0, b.port),
                )
            })?;
        out.brokers.insert(
            b.node_id.0,
            Broker {
                node_id: b.node_id.0,
                host: b.host.to_string(),
                port,
            },
        );
    }
    for t in &r.topics {
        let Some(name) = t.name.as_ref().map(|n| n.to_string()) else {
            return Err(DataError::invalid(
                ApiKey::Metadata,
                None,
                "a topic without a name",
            ));
        };
        if t.error_code != 0 {
            out.topic_errors.insert(name.clone(), t.error_code);
        }
        for p in &t.partitions {
            if p.partition_index < 0 {
                return Err(DataError::invalid(
                    ApiKey::Metadata,
                    None,
                    format!("{name} has partition {}", p.partition_index),
                ));
            }
            let leader = (p.leader_id.0 >= 0).then_some(p.leader_id.0);
            out.partitions
                .insert(TopicPartition::new(name.clone(), p.partition_index), leader);
        }
    }
    Ok(out)
}

// ------------------------------------------------------------------------------- list offsets

/// Where to start a partition that has no committed offset (`auto.offset.reset`).
pub use consumer_membership::OffsetReset;

/// The earliest or latest offset of each of `partitions`, all led by `leader`.
pub async fn list_offsets<T: Transport>(
    transport: &T,
    leader: &Broker,
    partitions: &[TopicPartition],
    reset: OffsetReset,
    timeout: Duration,
) -> Result<BTreeMap<TopicPartition, Result<i64, DataError>>, DataError> {
    let topics = topics_of(
        partitions.iter().map(|tp| (tp, ())),
        |p, ()| {
            ListOffsetsPartition::default()
                .with_partition_index(p)
                .with_timestamp(reset.list_offsets_timestamp())
        },
        |name, ps| {
            ListOffsetsTopic::default()
                .with_name(name)
                .with_partitions(ps)
        },
    );
    let body = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(0)
        .with_topics(topics);
    let body = RequestKind::ListOffsets(body);
    let answer = send_to(transport, leader, body, LIST_OFFSETS_VERSIONS, timeout).await?;
    let ResponseBody::Kafka(ResponseKind::ListOffsets(r)) = answer else {
        return Err(DataError::invalid(
            ApiKey::ListOffsets,
            None,
            "not a ListOffsets response",
        ));
    };
    let mut out = BTreeMap::new();
    for t in &r.topics {
        for p in &t.partitions {
            let tp = TopicPartition::new(t.name.to_string(), p.partition_index);
            if !partitions.contains(&tp) {
                continue;
            }
            let result = if p.error_code != 0 {
                Err(DataError::Kafka {
                    api: ApiKey::ListOffsets,
                    partition: Some(tp.clone()),
                    code: p.error_code,
                    message: None,
                })
            } else if p.offset < 0 {
                Err(DataError::invalid(
                    ApiKey::ListOffsets,
                    Some(&tp),
                    format!("offset {}", p.offset),
                ))
            } else {
                Ok(p.offset)
            };
            out.insert(tp, result);
        }
    }
    for tp in partitions {
        out.entry(tp.clone()).or_insert_with(|| {
            Err(DataError::invalid(
                ApiKey::ListOffsets,
                Some(tp),
                "partition missing from the answer",
            ))
        });
    }
    Ok(out)
}

// ------------------------------------------------------------------------------- fetch

/// One record as fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its offset.
    pub offset: i64,
    /// Its timestamp (ms since the epoch).
    pub timestamp: i64,
    /// Its key.
    pub key: Option<Bytes>,
    /// Its value.
    pub value: Option<Bytes>,
}

/// Fetch settings (the Java consumer's names and defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchOptions {
    /// `fetch.max.wait.ms` (500 ms).
    pub max_wait: Duration,
    /// `fetch.min.bytes` (1).
    pub min_bytes: i32,
    /// `fetch.max.bytes` (50 MiB).
    pub max_bytes: i32,
    /// `max.partition.fetch.bytes` (1 MiB).
    pub partition_max_bytes: i32,
    /// How long to wait for the answer on top of `max_wait` (`request.timeout.ms`).
    pub request_timeout: Duration,
}

impl Default for FetchOptions {
    fn default() -> Self {
        Self {
            max_wait: Duration::from_millis(500),
            min_bytes: 1,
            max_bytes: 50 * 1024 * 1024,
            partition_max_bytes: 1024 * 1024,
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// What a fetch returned for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The partition's high watermark.
    pub high_watermark: i64,
    /// Records at or after the fetch offset, in offset order (control records left out).
    pub records: Vec<Record>,
    /// Where the next fetch starts: after the last complete batch (control batches and records
    /// removed by compaction included), `None` when no batch was complete.
    pub next_offset: Option<i64>,
}

/// Fetches `positions` (partition, next offset), all led by `leader`, in one sessionless Fetch
/// (read_uncommitted). Per-partition errors are in the map; partitions the broker left out of
/// its answer are missing from it.
pub async fn fetch<T: Transport>(
    transport: &T,
    leader: &Broker,
    positions: &[(TopicPartition, i64)],
    options: &FetchOptions,
) -> Result<BTreeMap<TopicPartition, Result<Fetched, DataError>>, DataError> {
    let topics = topics_of(
        positions.iter().map(|(tp, offset)| (tp, *offset)),
        |p, offset| {
            FetchPartition::default()
                .with_partition(p)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(options.partition_max_bytes)
        },
        |name, ps| FetchTopic::default().with_topic(name).with_partitions(ps),
    );
    let millis = |d: Duration| i32::try_from(d.as_millis()).unwrap_or(i32::MAX);
    let body = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(millis(options.max_wait))
        .with_min_bytes(options.min_bytes)
        .with_max_bytes(options.max_bytes)
        .with_isolation_level(0)
        // No fetch session: session id 0 with the final epoch asks for a full, sessionless fetch.
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(topics);
    let body = RequestKind::Fetch(body);
    let timeout = options.request_timeout + options.max_wait;
    let answer = send_to(transport, leader, body, FETCH_VERSIONS, timeout).await?;
    let ResponseBody::Kafka(ResponseKind::Fetch(r)) = answer else {
        return Err(DataError::invalid(
            ApiKey::Fetch,
            None,
            "not a Fetch response",
        ));
    };
    if r.error_code != 0 {
        return Err(DataError::Kafka {
            api: ApiKey::Fetch,
            partition: None,
            code: r.error_code,
            message: None,
        });
    }
    let mut out = BTreeMap::new();
    for t in r.responses {
        for p in t.partitions {
            let tp = TopicPartition::new(t.topic.to_string(), p.partition_index);
            let Some(&(_, from)) = positions.iter().find(|(x, _)| *x == tp) else {
                continue;
            };
            let result = if p.error_code != 0 {
                Err(DataError::Kafka {
                    api: ApiKey::Fetch,
                    partition: Some(tp.clone()),
                    code: p.error_code,
                    message: None,
                })
            } else {
                decode_records(&tp, p.records.unwrap_or_default(), from).map(
                    |(records, next_offset)| Fetched {
                        high_watermark: p.high_watermark,
                        records,
                        next_offset,
                    },
                )
            };
            out.insert(tp, result);
        }
    }
    Ok(out)
}

/// Decodes the record batches of a fetched partition, keeping records at or after `from`
/// (a batch may start before the fetch offset); also returns the offset after the last complete
/// batch, where the next fetch starts. A batch cut off at the end of the answer (the broker fills
/// up to the byte limit) is left for the next fetch. Compressed batches are
/// [`DataError::Compressed`]; control records (transaction markers) are skipped.
pub fn decode_records(
    tp: &TopicPartition,
    mut bytes: Bytes,
    from: i64,
) -> Result<(Vec<Record>, Option<i64>), DataError> {
    let invalid = |reason: String| DataError::invalid(ApiKey::Fetch, Some(tp), reason);
    let mut out = Vec::new();
    let mut next_offset = None;
    while bytes.len() >= 12 {
        let base_offset = i64::from_be_bytes(bytes[0..8].try_into().expect("8 bytes"));
        let length = i32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes"));
        let total = usize::try_from(length)
            .ok()
            .and_then(|l| l.checked_add(12))
            .ok_or_else(|| invalid(format!("batch at {base_offset} has length {length}")))?;
        if bytes.len() < total {
            break; // cut off by the byte limit
        }
        let mut batch = bytes.split_to(total);
        if total < BATCH_HEADER {
            return Err(invalid(format!(
                "batch at {base_offset} is {total} bytes, shorter than a batch header"
            )));
        }
        let magic = batch[16];
        if magic != 2 {
            return Err(invalid(format!(
                "batch at {base_offset} has message format v{magic}; only v2 is supported"
            )));
        }
        let attributes = i16::from_be_bytes([batch[21], batch[22]]);
        let codec = match attributes & 0x7 {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            other => {
                return Err(invalid(format!(
                    "batch at {base_offset} has unknown codec {other}"
                )));
            }
        };
        if codec != Compression::None {
            return Err(DataError::Compressed {
                partition: tp.clone(),
                base_offset,
                codec,
            });
        }
        // The decoder reserves room for the announced count up front: check it against the
        // bytes that are really there first.
        let count = i32::from_be_bytes(batch[57..61].try_into().expect("4 bytes"));
        if usize::try_from(count).map_or(true, |c| c > (total - BATCH_HEADER) / MIN_RECORD) {
            return Err(invalid(format!(
                "batch at {base_offset} announces {count} records in {} bytes",
                total - BATCH_HEADER
            )));
        }
        let last_delta = i32::from_be_bytes(batch[23..27].try_into().expect("4 bytes"));
        let end = u32::try_from(last_delta)
            .ok()
            .and_then(|d| base_offset.checked_add(i64::from(d) + 1))
            .ok_or_else(|| {
                invalid(format!(
                    "batch at {base_offset} has last offset delta {last_delta}"
                ))
            })?;
        let control = attributes & (1 << 5) != 0;
        let set = RecordBatchDecoder::decode(&mut batch)
            .map_err(|e| invalid(format!("batch at {base_offset}: {e}")))?;
        next_offset = Some(next_offset.map_or(end, |n: i64| n.max(end)));
        if control {
            continue;
        }
        out.extend(
            set.records
                .into_iter()
                .filter(|r| r.offset >= from && !r.control)
                .map(|r| Record {
                    offset: r.offset,
                    timestamp: r.timestamp,
                    key: r.key,
                    value: r.value,
                }),
        );
    }
    Ok((out, next_offset))
}

// ------------------------------------------------------------------------------- produce

/// Encodes `records` (key, value) as one uncompressed v2 batch with `timestamp` (ms).
pub fn encode_batch(
    records: &[(Option<Bytes>, Option<Bytes>)],
    timestamp: i64,
) -> Result<Bytes, DataError> {
    if records.is_empty() {
        return Err(DataError::invalid(
            ApiKey::Produce,
            None,
            "a batch needs at least one record",
        ));
    }
    let records: Vec<kafka_protocol::records::Record> = records
        .iter()
        .zip(0i32..)
        .map(|((key, value), delta)| kafka_protocol::records::Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i64::from(delta),
            // No producer id: the batch's base sequence must be -1. The encoder starts a new
            // batch wherever `offset - sequence` changes, so the sequence follows the offset.
            sequence: delta.wrapping_sub(1),
            timestamp,
            key: key.clone(),
            value: value.clone(),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| DataError::invalid(ApiKey::Produce, None, format!("encoding: {e}")))?;
    Ok(buf.freeze())
}

/// Produces `records` to `tp` through its current leader (looked up with `metadata_timeout`),
/// as [`produce`] does; errors that need fresh metadata (leadership still settling right after
/// CreateTopics) are retried every 200 ms until `deadline`. Returns the offset of the first
/// record.
pub async fn produce_settling<T: Transport>(
    transport: &T,
    tp: &TopicPartition,
    records: &[(Option<Bytes>, Option<Bytes>)],
    metadata_timeout: Duration,
    deadline: std::time::Instant,
) -> Result<i64, DataError> {
    loop {
        let attempt = async {
            let leaders = leaders(transport, &[tp.topic().to_owned()], metadata_timeout).await?;
            let leader = leaders.leader(tp)?;
            produce(transport, leader, tp, records, Duration::from_secs(15)).await
        };
        match attempt.await {
            Err(e) if e.needs_metadata() && std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            result => return result,
        }
    }
}

/// Produces `records` (key, value) to `tp` through its `leader` as one uncompressed batch,
/// `acks=all`; returns the offset of the first record.
pub async fn produce<T: Transport>(
    transport: &T,
    leader: &Broker,
    tp: &TopicPartition,
    records: &[(Option<Bytes>, Option<Bytes>)],
    timeout: Duration,
) -> Result<i64, DataError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let batch = encode_batch(records, now)?;
    let body = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX))
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(topic_name(&tp.topic))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(tp.partition)
                        .with_records(Some(batch)),
                ]),
        ]);
    let body = RequestKind::Produce(body);
    let wait = timeout + Duration::from_secs(5);
    let answer = send_to(transport, leader, body, PRODUCE_VERSIONS, wait).await?;
    let ResponseBody::Kafka(ResponseKind::Produce(r)) = answer else {
        return Err(DataError::invalid(
            ApiKey::Produce,
            Some(tp),
            "not a Produce response",
        ));
    };
    let p = r
        .responses
        .iter()
        .filter(|t| t.name.0.as_str() == tp.topic())
        .flat_map(|t| &t.partition_responses)
        .find(|p| p.index == tp.partition)
        .ok_or_else(|| {
            DataError::invalid(
                ApiKey::Produce,
                Some(tp),
                "partition missing from the answer",
            )
        })?;
    if p.error_code != 0 {
        return Err(DataError::Kafka {
            api: ApiKey::Produce,
            partition: Some(tp.clone()),
            code: p.error_code,
            message: p
                .error_message
                .as_ref()
                .map(|m| m.to_string())
                .into_iter()
                .chain(p.record_errors.iter().map(|e| {
                    format!(
                        "record {}: {}",
                        e.batch_index,
                        e.batch_index_error_message.as_deref().unwrap_or("?")
                    )
                }))
                .reduce(|a, b| format!("{a}; {b}")),
        });
    }
    Ok(p.base_offset)
}

/// The topics of a request: `partitions` grouped by topic (in name order; a topic's in the order
/// given), each partition built by `partition` from its index and its `P`, each topic by `topic`
/// from its name and its partitions.
fn topics_of<'a, P, Part, Topic>(
    partitions: impl IntoIterator<Item = (&'a TopicPartition, P)>,
    partition: impl Fn(i32, P) -> Part,
    topic: impl Fn(TopicName, Vec<Part>) -> Topic,
) -> Vec<Topic> {
    let mut by_topic: BTreeMap<&str, Vec<Part>> = BTreeMap::new();
    for (tp, p) in partitions {
        (by_topic.entry(&tp.topic).or_default()).push(partition(tp.partition, p));
    }
    (by_topic.into_iter())
        .map(|(name, parts)| topic(topic_name(name), parts))
        .collect()
}

/// Sends `body` (at `versions`) to `leader` and hands back the answer's body.
async fn send_to<T: Transport>(
    transport: &T,
    leader: &Broker,
    body: RequestKind,
    versions: RangeInclusive<i16>,
    timeout: Duration,
) -> Result<ResponseBody, DataError> {
    let request = Request::Raw {
        body: Box::new(body),
        versions,
        fit: None,
    };
    let response = (transport.send(Target::Node(leader.clone()), request, timeout)).await?;
    Ok(response.body)
}

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

/// The arguments of the group examples that say where to go: the broker and the group
/// (`#[command(flatten)]`; each example gives `--group` its help and default with
/// [`group_arg`]).
#[derive(Debug, clap::Args)]
pub struct GroupArgs {
    /// Bootstrap brokers [default: $KAFKA_BOOTSTRAP, else the broker tests/kafka/broker.sh started]
    #[arg(long, value_name = "HOST:PORT[,...]")]
    pub bootstrap: Option<String>,
    #[arg(long, value_name = "GROUP")]
    pub group: String,
}

/// `--group` with `help` and the default `group` (`#[command(mut_arg("group", group_arg(...)))]`
/// next to a flattened [`GroupArgs`]).
pub fn group_arg(help: &'static str, group: &'static str) -> impl FnOnce(clap::Arg) -> clap::Arg {
    move |arg| arg.help(help).required(false).default_value(group)
}

/// `--bootstrap`, else [`local_bootstrap`]; without either the example stops (exit code 1).
pub fn bootstrap_or_exit(bootstrap: Option<String>) -> String {
    let Some(bootstrap) = bootstrap.or_else(local_bootstrap) else {
        eprintln!(
            "no broker: pass --bootstrap, set KAFKA_BOOTSTRAP, or run through tests/kafka/with-broker.sh"
        );
        std::process::exit(1)
    };
    bootstrap
}

/// The broker of an example: `KAFKA_BOOTSTRAP`, else the one tests/kafka/broker.sh started
/// (target/kafka-it/bootstrap).
pub fn local_bootstrap() -> Option<String> {
    if let Ok(b) = std::env::var("KAFKA_BOOTSTRAP") {
        return Some(b);
    }
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/target/kafka-it/bootstrap");
    std::fs::read_to_string(file)
        .ok()
        .map(|s| s.trim().to_owned())
}
