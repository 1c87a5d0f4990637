//! The bytes of the classic consumer protocol: the `Subscription` a member puts in JoinGroup
//! (`ConsumerProtocolSubscription`) and the `Assignment` the leader hands out in SyncGroup
//! (`ConsumerProtocolAssignment`).
//!
//! Both are an int16 version followed by the struct at that version (no flexible versions, no
//! tagged fields). Like Java's `ConsumerProtocol`, this module writes the newest version it knows
//! (3) and reads any version from 0 up; a version newer than 3 is parsed with the version-3 layout,
//! because the schemas promise that later versions only append fields. Trailing bytes are
//! therefore ignored, at every version, as Java does.
//!
//! The bytes come from other members (through the coordinator), so they are walked
//! (`crate::wire::bounded`) before kafka-protocol decodes them: an array count or a string or bytes
//! length claiming more than the bytes left is a [`ProtocolError::Malformed`], and nothing is
//! allocated for it (kafka-protocol 0.18.0 would reserve room for any count it reads).

use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::TopicName;
use kafka_protocol::messages::consumer_protocol_assignment as wire_assignment;
use kafka_protocol::messages::consumer_protocol_subscription as wire_subscription;
use kafka_protocol::messages::{ConsumerProtocolAssignment, ConsumerProtocolSubscription};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::partition::TopicPartition;
use crate::wire::bounded::{Cursor, Walk};

/// The newest `ConsumerProtocolSubscription` / `ConsumerProtocolAssignment` version this crate
/// knows; it is what [`Subscription::encode`] and [`Assignment::encode`] write (Java's
/// `ConsumerProtocol.serializeSubscription`/`serializeAssignment` write their
/// `HIGHEST_SUPPORTED_VERSION`, also 3 in Kafka 4.x).
pub const CONSUMER_PROTOCOL_VERSION: i16 = 3;

/// The longest string the protocol can carry (int16 length prefix).
const MAX_STRING_LEN: usize = i16::MAX as usize;
/// The longest byte array the protocol can carry (int32 length prefix).
const MAX_BYTES_LEN: usize = i32::MAX as usize;

/// Why consumer-protocol bytes could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The bytes are too short to hold the int16 version prefix.
    #[error("{what} is {len} byte(s) long, too short for its int16 version prefix")]
    MissingVersion {
        /// Which message (`"subscription"` or `"assignment"`).
        what: &'static str,
        /// How many bytes there were.
        len: usize,
    },
    /// The version prefix is negative; no such version exists.
    #[error("{what} has unsupported version {version}")]
    UnsupportedVersion {
        /// Which message.
        what: &'static str,
        /// The version read.
        version: i16,
    },
    /// The body does not parse at its version (truncated, a negative or overlong length, invalid
    /// UTF-8, ...).
    #[error("malformed {what} v{version} (read as v{read_as}): {reason}")]
    Malformed {
        /// Which message.
        what: &'static str,
        /// The version the bytes announced.
        version: i16,
        /// The layout they were parsed with (`min(version, 3)`).
        read_as: i16,
        /// The decoder's message.
        reason: String,
    },
    /// A topic name no Kafka topic can have: empty, `.` or `..`, over 249 characters, or with a
    /// character outside `[a-zA-Z0-9._-]` (Java's `Topic.validate`). Such a name can only be
    /// forged, and refusing it keeps what the bytes decode to in proportion to them.
    #[error("{what} v{version} names an invalid topic {topic:?}: {reason}")]
    InvalidTopic {
        /// Which message.
        what: &'static str,
        /// The version the bytes announced.
        version: i16,
        /// The name (its first 64 characters at most, lossily decoded).
        topic: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A negative partition id.
    #[error("{what} v{version} lists partition {partition} of topic {topic:?}")]
    InvalidPartition {
        /// Which message.
        what: &'static str,
        /// The version the bytes announced.
        version: i16,
        /// The topic.
        topic: String,
        /// The partition id.
        partition: i32,
    },
    /// The value cannot be represented on the wire (a string over 32767 bytes, user data over
    /// 2 GiB).
    #[error("cannot encode {what}: {reason}")]
    Encode {
        /// Which message.
        what: &'static str,
        /// Why.
        reason: String,
    },
}

const SUBSCRIPTION: &str = "subscription";
const ASSIGNMENT: &str = "assignment";

/// What a member sends in the `metadata` of its JoinGroup protocols (one per assignor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// The topics the member wants to consume.
    pub topics: Vec<String>,
    /// Assignor-specific data, passed to the leader's assignor as is.
    pub user_data: Option<Bytes>,
    /// The partitions the member owns now (v1+); the cooperative protocol depends on it.
    pub owned_partitions: Vec<TopicPartition>,
    /// The generation in which the member got `owned_partitions` (v2+); -1 when unknown.
    pub generation_id: i32,
    /// The member's rack (`client.rack`, v3+).
    pub rack_id: Option<String>,
}

impl Default for Subscription {
    fn default() -> Self {
        Self {
            topics: Vec::new(),
            user_data: None,
            owned_partitions: Vec::new(),
            generation_id: -1,
            rack_id: None,
        }
    }
}

impl Subscription {
    /// A subscription to `topics` owning nothing, generation -1.
    pub fn new<I, S>(topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            topics: topics.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// The version-3 bytes (version prefix included). Topics are sorted and deduplicated, owned
    /// partitions grouped by topic and sorted by topic then partition, as Java's
    /// `ConsumerProtocol.serializeSubscription` does.
    ///
    /// Values the wire cannot carry are left out rather than failing: a topic name over 32767
    /// bytes (Kafka limits names to 249 characters, so no such topic exists), a rack id over 32767
    /// bytes (sent as no rack) and user data over 2 GiB (sent as none). Use
    /// [`try_encode`](Self::try_encode) to get an error instead.
    pub fn encode(&self) -> Bytes {
        let mut wire = self.to_wire();
        wire.topics.retain(|t| t.len() <= MAX_STRING_LEN);
        wire.owned_partitions
            .retain(|tp| tp.topic.0.len() <= MAX_STRING_LEN);
        if wire
            .rack_id
            .as_ref()
            .is_some_and(|r| r.len() > MAX_STRING_LEN)
        {
            wire.rack_id = None;
        }
        if wire
            .user_data
            .as_ref()
            .is_some_and(|d| d.len() > MAX_BYTES_LEN)
        {
            wire.user_data = None;
        }
        // Everything left is representable, so this cannot fail; fall back to an empty body
        // rather than panic should the library ever disagree.
        encode_prefixed(SUBSCRIPTION, &wire).unwrap_or_else(|_| version_only())
    }

    /// Like [`encode`](Self::encode), but fails on a value the wire cannot carry instead of
    /// leaving it out.
    pub fn try_encode(&self) -> Result<Bytes, ProtocolError> {
        encode_prefixed(SUBSCRIPTION, &self.to_wire())
    }

    fn to_wire(&self) -> ConsumerProtocolSubscription {
        let mut topics: Vec<&str> = self.topics.iter().map(String::as_str).collect();
        topics.sort_unstable();
        topics.dedup();
        ConsumerProtocolSubscription::default()
            .with_topics(topics.into_iter().map(str_bytes).collect())
            .with_user_data(self.user_data.clone())
            .with_owned_partitions(
                group_by_topic(&self.owned_partitions)
                    .into_iter()
                    .map(|(topic, partitions)| {
                        wire_subscription::TopicPartition::default()
                            .with_topic(TopicName(str_bytes(topic)))
                            .with_partitions(partitions)
                    })
                    .collect(),
            )
            .with_generation_id(self.generation_id)
            .with_rack_id(self.rack_id.as_deref().map(str_bytes))
    }

    /// Reads a subscription of any version (prefix included). Versions above 3 are read with the
    /// version-3 layout; an empty rack id reads as `None`, as in Java.
    pub fn decode(bytes: &[u8]) -> Result<Subscription, ProtocolError> {
        let (version, read_as, mut body) = read_version(SUBSCRIPTION, bytes)?;
        let malformed = |reason| ProtocolError::Malformed {
            what: SUBSCRIPTION,
            version,
            read_as,
            reason,
        };
        walk_subscription(&mut Cursor::new(&body), read_as).map_err(malformed)?;
        let wire = ConsumerProtocolSubscription::decode(&mut body, read_as)
            .map_err(|e| malformed(e.to_string()))?;
        Ok(Subscription {
            topics: wire
                .topics
                .iter()
                .map(|t| check_topic(SUBSCRIPTION, version, t).map(str::to_owned))
                .collect::<Result<_, _>>()?,
            owned_partitions: expand(
                SUBSCRIPTION,
                version,
                wire.owned_partitions
                    .iter()
                    .map(|tp| (&tp.topic.0, &tp.partitions[..])),
            )?,
            user_data: wire.user_data,
            generation_id: wire.generation_id,
            rack_id: wire
                .rack_id
                .filter(|r| !r.is_empty())
                .map(|r| r.as_str().to_owned()),
        })
    }
}

/// What the leader assigns one member, returned to it in SyncGroup.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Assignment {
    /// The partitions the member is to consume.
    pub partitions: Vec<TopicPartition>,
    /// Assignor-specific data.
    pub user_data: Option<Bytes>,
}

impl Assignment {
    /// The version-3 bytes (version prefix included), partitions grouped by topic and sorted by
    /// topic then partition. A topic name over 32767 bytes or user data over 2 GiB is left out (no
    /// such topic can exist); use [`try_encode`](Self::try_encode) to get an error instead.
    pub fn encode(&self) -> Bytes {
        let mut wire = self.to_wire();
        wire.assigned_partitions
            .retain(|tp| tp.topic.0.len() <= MAX_STRING_LEN);
        if wire
            .user_data
            .as_ref()
            .is_some_and(|d| d.len() > MAX_BYTES_LEN)
        {
            wire.user_data = None;
        }
        encode_prefixed(ASSIGNMENT, &wire).unwrap_or_else(|_| version_only())
    }

    /// Like [`encode`](Self::encode), but fails on a value the wire cannot carry.
    pub fn try_encode(&self) -> Result<Bytes, ProtocolError> {
        encode_prefixed(ASSIGNMENT, &self.to_wire())
    }

    fn to_wire(&self) -> ConsumerProtocolAssignment {
        ConsumerProtocolAssignment::default()
            .with_assigned_partitions(
                group_by_topic(&self.partitions)
                    .into_iter()
                    .map(|(topic, partitions)| {
                        wire_assignment::TopicPartition::default()
                            .with_topic(TopicName(str_bytes(topic)))
                            .with_partitions(partitions)
                    })
                    .collect(),
            )
            .with_user_data(self.user_data.clone())
    }

    /// Reads an assignment of any version (prefix included); versions above 3 are read with the
    /// version-3 layout.
    ///
    /// Empty bytes read as an empty assignment. The coordinator hands empty bytes to a member the
    /// leader left out of its SyncGroup assignments; librdkafka
    /// (`rd_kafka_cgrp_handle_SyncGroup_memberstate`) reads them as an empty assignment, whereas
    /// Java's `ConsumerCoordinator.onJoinComplete` throws an `IllegalStateException` ("There are
    /// insufficient bytes available to read assignment ...") for fewer than 2 bytes. A caller
    /// that prefers Java's reaction can test `bytes.is_empty()` first. A single byte is an error.
    pub fn decode(bytes: &[u8]) -> Result<Assignment, ProtocolError> {
        if bytes.is_empty() {
            return Ok(Assignment::default());
        }
        let (version, read_as, mut body) = read_version(ASSIGNMENT, bytes)?;
        let malformed = |reason| ProtocolError::Malformed {
            what: ASSIGNMENT,
            version,
            read_as,
            reason,
        };
        walk_assignment(&mut Cursor::new(&body)).map_err(malformed)?;
        let wire = ConsumerProtocolAssignment::decode(&mut body, read_as)
            .map_err(|e| malformed(e.to_string()))?;
        Ok(Assignment {
            partitions: expand(
                ASSIGNMENT,
                version,
                wire.assigned_partitions
                    .iter()
                    .map(|tp| (&tp.topic.0, &tp.partitions[..])),
            )?,
            user_data: wire.user_data,
        })
    }
}

/// ConsumerProtocolSubscription.json at `version` (0-3, never flexible): Topics, UserData,
/// OwnedPartitions (v1+), GenerationId (v2+), RackId (v3+). Bytes after them are ignored.
fn walk_subscription(c: &mut Cursor, version: i16) -> Walk {
    c.array(false, |c| c.string(false))?;
    c.bytes(false)?;
    if version >= 1 {
        c.array(false, topic_partitions)?;
    }
    c.skip_if(version >= 2, 4)?;
    if version >= 3 {
        c.string(false)?;
    }
    Ok(())
}

/// ConsumerProtocolAssignment.json (the same layout at v0-3): AssignedPartitions, UserData.
fn walk_assignment(c: &mut Cursor) -> Walk {
    c.array(false, topic_partitions)?;
    c.bytes(false)
}

/// A topic name and its partition ids (both messages' `TopicPartition`).
fn topic_partitions(c: &mut Cursor) -> Walk {
    c.string(false)?;
    c.array(false, |c| c.skip(4))
}

/// The longest topic name Kafka allows (Java's `Topic.MAX_NAME_LENGTH`).
pub const MAX_TOPIC_NAME_LEN: usize = 249;

/// Why `name` cannot be a Kafka topic name, if it cannot (Java's `Topic.validate`).
pub fn topic_name_error(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("empty")
    } else if name == "." || name == ".." {
        Some("\".\" and \"..\" are not allowed")
    } else if name.len() > MAX_TOPIC_NAME_LEN {
        Some("longer than 249 characters")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        Some("a character outside [a-zA-Z0-9._-]")
    } else {
        None
    }
}

/// `name`, if Kafka allows it as a topic name.
fn check_topic<'a>(
    what: &'static str,
    version: i16,
    name: &'a StrBytes,
) -> Result<&'a str, ProtocolError> {
    match topic_name_error(name) {
        None => Ok(name.as_str()),
        Some(reason) => Err(ProtocolError::InvalidTopic {
            what,
            version,
            topic: name.chars().take(64).collect(),
            reason,
        }),
    }
}

/// The partitions of (topic, ids) runs, every name checked before anything is allocated for
/// it, and shared by the partitions of its run: the result takes a few words per partition id
/// read, however long the names are.
fn expand<'a>(
    what: &'static str,
    version: i16,
    runs: impl Iterator<Item = (&'a StrBytes, &'a [i32])> + Clone,
) -> Result<Vec<TopicPartition>, ProtocolError> {
    let mut total = 0usize;
    for (topic, ids) in runs.clone() {
        let name = check_topic(what, version, topic)?;
        if let Some(&partition) = ids.iter().find(|&&p| p < 0) {
            return Err(ProtocolError::InvalidPartition {
                what,
                version,
                topic: name.to_owned(),
                partition,
            });
        }
        total += ids.len();
    }
    let mut partitions = Vec::with_capacity(total);
    for (topic, ids) in runs {
        let name: Arc<str> = Arc::from(topic.as_str());
        partitions.extend(ids.iter().map(|&p| TopicPartition::new(&name, p)));
    }
    Ok(partitions)
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// `partitions` sorted and deduplicated, as (topic, partition ids) runs.
fn group_by_topic(partitions: &[TopicPartition]) -> Vec<(&str, Vec<i32>)> {
    let mut sorted: Vec<(&str, i32)> = partitions
        .iter()
        .map(|tp| (tp.topic(), tp.partition))
        .collect();
    sorted.sort_unstable();
    sorted.dedup();
    let mut groups: Vec<(&str, Vec<i32>)> = Vec::new();
    for (topic, partition) in sorted {
        match groups.last_mut() {
            Some((last, ids)) if *last == topic => ids.push(partition),
            _ => groups.push((topic, vec![partition])),
        }
    }
    groups
}

fn encode_prefixed<M: Encodable>(what: &'static str, message: &M) -> Result<Bytes, ProtocolError> {
    let encode_error = |e: anyhow::Error| ProtocolError::Encode {
        what,
        reason: e.to_string(),
    };
    let size = message
        .compute_size(CONSUMER_PROTOCOL_VERSION)
        .map_err(encode_error)?;
    let mut buf = BytesMut::with_capacity(2 + size);
    buf.put_i16(CONSUMER_PROTOCOL_VERSION);
    message
        .encode(&mut buf, CONSUMER_PROTOCOL_VERSION)
        .map_err(encode_error)?;
    Ok(buf.freeze())
}

/// A body-less message: what `encode` falls back to if the library refuses a value it was
/// expected to accept.
fn version_only() -> Bytes {
    Bytes::copy_from_slice(&CONSUMER_PROTOCOL_VERSION.to_be_bytes())
}

/// Splits off the version prefix: (version read, layout to parse with, body).
fn read_version(what: &'static str, bytes: &[u8]) -> Result<(i16, i16, Bytes), ProtocolError> {
    let mut buf = Bytes::copy_from_slice(bytes);
    let version = buf
        .try_get_i16()
        .map_err(|_| ProtocolError::MissingVersion {
            what,
            len: bytes.len(),
        })?;
    if version < 0 {
        return Err(ProtocolError::UnsupportedVersion { what, version });
    }
    // Java's ConsumerProtocol.checkSubscriptionVersion / checkAssignmentVersion: a newer version
    // is read as the newest known one, since fields are only ever appended.
    Ok((version, version.min(CONSUMER_PROTOCOL_VERSION), buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition::new(topic, partition)
    }

    fn full_subscription() -> Subscription {
        Subscription {
            topics: vec!["b".into(), "a".into(), "c".into()],
            user_data: Some(Bytes::from_static(b"\x00\x00\x00\x07")),
            owned_partitions: vec![tp("b", 2), tp("a", 1), tp("b", 0), tp("a", 0)],
            generation_id: 42,
            rack_id: Some("rack-1".into()),
        }
    }

    /// Bytes for `wire` at `version`, prefix included, via the generated encoder.
    fn wire_bytes<M: Encodable>(wire: &M, version: i16) -> Vec<u8> {
        let mut buf = BytesMut::new();
        buf.put_i16(version);
        wire.encode(&mut buf, version).unwrap();
        buf.to_vec()
    }

    fn wire_subscription_v(version: i16) -> ConsumerProtocolSubscription {
        let mut wire = ConsumerProtocolSubscription::default()
            .with_topics(vec![str_bytes("t0"), str_bytes("t1")])
            .with_user_data(Some(Bytes::from_static(b"ud")));
        if version >= 1 {
            wire = wire.with_owned_partitions(vec![
                wire_subscription::TopicPartition::default()
                    .with_topic(TopicName(str_bytes("t0")))
                    .with_partitions(vec![0, 2]),
            ]);
        }
        if version >= 2 {
            wire = wire.with_generation_id(9);
        }
        if version >= 3 {
            wire = wire.with_rack_id(Some(str_bytes("r")));
        }
        wire
    }

    #[test]
    fn subscription_round_trips_at_v3_sorted_and_grouped() {
        let bytes = full_subscription().encode();
        assert_eq!(&bytes[..2], &3i16.to_be_bytes());
        let decoded = Subscription::decode(&bytes).unwrap();
        assert_eq!(
            decoded,
            Subscription {
                topics: vec!["a".into(), "b".into(), "c".into()],
                owned_partitions: vec![tp("a", 0), tp("a", 1), tp("b", 0), tp("b", 2)],
                ..full_subscription()
            }
        );
        // The wire groups owned partitions by topic.
        let wire =
            ConsumerProtocolSubscription::decode(&mut Bytes::copy_from_slice(&bytes[2..]), 3)
                .unwrap();
        assert_eq!(wire.owned_partitions.len(), 2);
        assert_eq!(wire.owned_partitions[1].partitions, vec![0, 2]);
        assert_eq!(decoded.encode(), bytes);
    }

    #[test]
    fn subscription_dedups_topics_and_owned_partitions() {
        let sub = Subscription {
            topics: vec!["x".into(), "x".into()],
            owned_partitions: vec![tp("x", 1), tp("x", 1)],
            ..Subscription::default()
        };
        let decoded = Subscription::decode(&sub.encode()).unwrap();
        assert_eq!(decoded.topics, vec!["x".to_owned()]);
        assert_eq!(decoded.owned_partitions, vec![tp("x", 1)]);
        assert_eq!(decoded.generation_id, -1);
        assert_eq!(decoded.rack_id, None);
        assert_eq!(decoded.user_data, None);
    }

    #[test]
    fn subscription_default_round_trips() {
        let sub = Subscription::default();
        assert_eq!(Subscription::decode(&sub.encode()).unwrap(), sub);
        let sub = Subscription::new(["t"]);
        assert_eq!(Subscription::decode(&sub.encode()).unwrap(), sub);
    }

    #[test]
    fn subscription_decodes_v0_v1_v2() {
        let v0 = Subscription::decode(&wire_bytes(&wire_subscription_v(0), 0)).unwrap();
        assert_eq!(v0.topics, vec!["t0".to_owned(), "t1".to_owned()]);
        assert_eq!(v0.user_data.as_deref(), Some(&b"ud"[..]));
        assert!(v0.owned_partitions.is_empty());
        assert_eq!(v0.generation_id, -1);
        assert_eq!(v0.rack_id, None);

        let v1 = Subscription::decode(&wire_bytes(&wire_subscription_v(1), 1)).unwrap();
        assert_eq!(v1.owned_partitions, vec![tp("t0", 0), tp("t0", 2)]);
        assert_eq!(v1.generation_id, -1);

        let v2 = Subscription::decode(&wire_bytes(&wire_subscription_v(2), 2)).unwrap();
        assert_eq!(v2.owned_partitions, vec![tp("t0", 0), tp("t0", 2)]);
        assert_eq!(v2.generation_id, 9);
        assert_eq!(v2.rack_id, None);

        let v3 = Subscription::decode(&wire_bytes(&wire_subscription_v(3), 3)).unwrap();
        assert_eq!(v3.generation_id, 9);
        assert_eq!(v3.rack_id.as_deref(), Some("r"));
    }

    #[test]
    fn subscription_empty_rack_reads_as_none() {
        let wire = wire_subscription_v(3).with_rack_id(Some(str_bytes("")));
        let sub = Subscription::decode(&wire_bytes(&wire, 3)).unwrap();
        assert_eq!(sub.rack_id, None);
    }

    #[test]
    fn subscription_future_version_is_read_with_v3_layout() {
        let mut bytes = wire_bytes(&wire_subscription_v(3), 3);
        bytes[..2].copy_from_slice(&7i16.to_be_bytes());
        // Fields a v7 would have appended.
        bytes.extend_from_slice(&[0, 0, 0, 5, 1, 2, 3]);
        let sub = Subscription::decode(&bytes).unwrap();
        assert_eq!(sub.generation_id, 9);
        assert_eq!(sub.rack_id.as_deref(), Some("r"));
        assert_eq!(sub.owned_partitions, vec![tp("t0", 0), tp("t0", 2)]);

        let mut max = wire_bytes(&wire_subscription_v(3), 3);
        max[..2].copy_from_slice(&i16::MAX.to_be_bytes());
        assert!(Subscription::decode(&max).is_ok());
    }

    #[test]
    fn subscription_negative_version_is_an_error() {
        let mut bytes = wire_bytes(&wire_subscription_v(0), 0);
        bytes[..2].copy_from_slice(&(-1i16).to_be_bytes());
        assert_eq!(
            Subscription::decode(&bytes),
            Err(ProtocolError::UnsupportedVersion {
                what: "subscription",
                version: -1
            })
        );
    }

    #[test]
    fn subscription_truncated_at_every_cut_is_an_error() {
        let bytes = full_subscription().encode();
        for cut in 0..bytes.len() {
            let err = Subscription::decode(&bytes[..cut]).unwrap_err();
            if cut < 2 {
                assert!(matches!(err, ProtocolError::MissingVersion { len, .. } if len == cut));
            } else {
                assert!(
                    matches!(err, ProtocolError::Malformed { version: 3, .. }),
                    "cut {cut}: {err}"
                );
            }
            assert!(!err.to_string().is_empty());
        }
        // Same for every older version.
        for version in 0..3 {
            let bytes = wire_bytes(&wire_subscription_v(version), version);
            for cut in 0..bytes.len() {
                assert!(
                    Subscription::decode(&bytes[..cut]).is_err(),
                    "v{version} cut {cut}"
                );
            }
        }
    }

    #[test]
    fn subscription_garbage_never_panics() {
        use rand::{RngCore, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let valid = full_subscription().encode();
        for _ in 0..2000 {
            let mut bytes = valid.to_vec();
            // Flip a few bytes of a valid message, or make random bytes.
            if rng.next_u32() % 2 == 0 {
                for _ in 0..1 + rng.next_u32() % 4 {
                    let i = (rng.next_u32() as usize) % bytes.len();
                    bytes[i] = rng.next_u32() as u8;
                }
            } else {
                bytes.truncate((rng.next_u32() as usize) % (bytes.len() + 1));
                rng.fill_bytes(&mut bytes);
            }
            let _ = Subscription::decode(&bytes);
            let _ = Assignment::decode(&bytes);
        }
    }

    #[test]
    fn subscription_invalid_utf8_is_an_error() {
        let mut bytes = Subscription::new(["ab"]).encode().to_vec();
        // version(2) + topic count(4) + string length(2), then "ab".
        bytes[8] = 0xff;
        assert!(matches!(
            Subscription::decode(&bytes),
            Err(ProtocolError::Malformed { .. })
        ));
    }

    #[test]
    fn forged_huge_array_count_is_an_error_quickly() {
        // "Quickly": the walk refuses a count larger than the bytes left before kafka-protocol
        // (which does not cap it) reserves room, so none of these allocates more than the input;
        // without the walk the first one aborts the process. (No clock here: core/src/machine may not
        // read one, see core/clippy.toml.)
        // Subscription: v3, topics count i32::MAX and nothing else.
        let mut forged = vec![0, 3];
        forged.extend_from_slice(&i32::MAX.to_be_bytes());
        assert!(matches!(
            Subscription::decode(&forged),
            Err(ProtocolError::Malformed { ref reason, .. }) if reason.contains("forged size")
        ));
        // Owned partitions count forged after a valid topics array and null user data.
        let mut forged = vec![0, 3, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff];
        forged.extend_from_slice(&i32::MAX.to_be_bytes());
        assert!(Subscription::decode(&forged).is_err());
        // Assignment: partitions array count, then an inner partition-id count.
        let mut forged = vec![0, 3];
        forged.extend_from_slice(&i32::MAX.to_be_bytes());
        assert!(matches!(
            Assignment::decode(&forged),
            Err(ProtocolError::Malformed { ref reason, .. }) if reason.contains("forged size")
        ));
        let mut forged = vec![0, 3, 0, 0, 0, 1, 0, 1, b't'];
        forged.extend_from_slice(&i32::MAX.to_be_bytes());
        assert!(Assignment::decode(&forged).is_err());
        // A forged user-data length.
        let mut forged = vec![0, 3, 0, 0, 0, 0];
        forged.extend_from_slice(&i32::MAX.to_be_bytes());
        assert!(Assignment::decode(&forged).is_err());
    }

    #[test]
    fn try_encode_rejects_what_encode_leaves_out() {
        let long = "x".repeat(MAX_STRING_LEN + 1);
        let sub = Subscription {
            topics: vec![long.clone(), "ok".into()],
            owned_partitions: vec![tp(&long, 0), tp("ok", 1)],
            rack_id: Some(long.clone()),
            ..Subscription::default()
        };
        assert!(matches!(
            sub.try_encode(),
            Err(ProtocolError::Encode {
                what: "subscription",
                ..
            })
        ));
        let decoded = Subscription::decode(&sub.encode()).unwrap();
        assert_eq!(decoded.topics, vec!["ok".to_owned()]);
        assert_eq!(decoded.owned_partitions, vec![tp("ok", 1)]);
        assert_eq!(decoded.rack_id, None);

        let assignment = Assignment {
            partitions: vec![tp(&long, 0), tp("ok", 0)],
            user_data: None,
        };
        assert!(assignment.try_encode().is_err());
        assert_eq!(
            Assignment::decode(&assignment.encode()).unwrap().partitions,
            vec![tp("ok", 0)]
        );
        assert_eq!(
            full_subscription().try_encode().unwrap(),
            full_subscription().encode()
        );
    }

    #[test]
    fn assignment_round_trips_at_v3() {
        let assignment = Assignment {
            partitions: vec![tp("b", 1), tp("a", 3), tp("b", 0), tp("a", 3)],
            user_data: Some(Bytes::from_static(b"hello")),
        };
        let bytes = assignment.encode();
        assert_eq!(&bytes[..2], &3i16.to_be_bytes());
        let decoded = Assignment::decode(&bytes).unwrap();
        assert_eq!(decoded.partitions, vec![tp("a", 3), tp("b", 0), tp("b", 1)]);
        assert_eq!(decoded.user_data, assignment.user_data);
        let wire = ConsumerProtocolAssignment::decode(&mut Bytes::copy_from_slice(&bytes[2..]), 3)
            .unwrap();
        assert_eq!(wire.assigned_partitions.len(), 2);

        let empty = Assignment::default();
        assert_eq!(Assignment::decode(&empty.encode()).unwrap(), empty);
    }

    #[test]
    fn assignment_decodes_old_and_future_versions() {
        let wire = ConsumerProtocolAssignment::default()
            .with_assigned_partitions(vec![
                wire_assignment::TopicPartition::default()
                    .with_topic(TopicName(str_bytes("t")))
                    .with_partitions(vec![3, 1]),
            ])
            .with_user_data(Some(Bytes::from_static(b"u")));
        for version in 0..=3 {
            let a = Assignment::decode(&wire_bytes(&wire, version)).unwrap();
            assert_eq!(a.partitions, vec![tp("t", 3), tp("t", 1)]);
            assert_eq!(a.user_data.as_deref(), Some(&b"u"[..]));
        }
        let mut future = wire_bytes(&wire, 3);
        future[..2].copy_from_slice(&7i16.to_be_bytes());
        future.extend_from_slice(b"appended field");
        let a = Assignment::decode(&future).unwrap();
        assert_eq!(a.partitions, vec![tp("t", 3), tp("t", 1)]);
    }

    #[test]
    fn assignment_empty_bytes_is_empty_assignment() {
        assert_eq!(Assignment::decode(&[]).unwrap(), Assignment::default());
        assert!(matches!(
            Assignment::decode(&[0]),
            Err(ProtocolError::MissingVersion { len: 1, .. })
        ));
        assert!(matches!(
            Assignment::decode(&[0xff, 0xfe]),
            Err(ProtocolError::UnsupportedVersion { version: -2, .. })
        ));
    }

    #[test]
    fn assignment_truncated_at_every_cut_is_an_error() {
        let bytes = Assignment {
            partitions: vec![tp("a", 0), tp("a", 1), tp("bb", 7)],
            user_data: Some(Bytes::from_static(b"xyz")),
        }
        .encode();
        for cut in 1..bytes.len() {
            assert!(Assignment::decode(&bytes[..cut]).is_err(), "cut {cut}");
        }
    }
}
