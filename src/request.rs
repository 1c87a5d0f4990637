//! The values that cross the sans-IO boundary: requests the core wants sent, where to, and the
//! responses handed back.

use std::fmt;
use std::ops::RangeInclusive;
use std::time::Duration;

use kafka_protocol::messages::{
    ApiKey, FindCoordinatorRequest, MetadataRequest, RequestKind, ResponseKind, TopicName,
    metadata_request::MetadataRequestTopic,
};
use kafka_protocol::protocol::StrBytes;

use crate::error::TransportError;

/// Identifies one request the core emitted; the driver hands it back with the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub(crate) u64);

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

/// Hands out increasing [`RequestId`]s.
#[derive(Debug, Default, Clone)]
pub(crate) struct RequestIds(u64);

impl RequestIds {
    /// Ids after `base`, so two machines of one member never hand out the same id.
    pub(crate) fn starting_at(base: u64) -> Self {
        Self(base)
    }

    pub(crate) fn next(&mut self) -> RequestId {
        self.0 += 1;
        RequestId(self.0)
    }
}

/// A broker as the cluster advertises it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Broker {
    /// The broker's node id.
    pub node_id: i32,
    /// Advertised host.
    pub host: String,
    /// Advertised port.
    pub port: u16,
}

impl fmt::Display for Broker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} ({}:{})", self.node_id, self.host, self.port)
    }
}

/// Where a request goes. A transport keeps one connection per target: the coordinator gets a
/// connection of its own even when it is a broker the client also fetches from, because a broker
/// reads one request per connection at a time and a long fetch must not delay a heartbeat (the
/// Java client does the same with its `Integer.MAX_VALUE - nodeId` coordinator connection).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// Any reachable bootstrap broker (FindCoordinator, Metadata).
    Bootstrap,
    /// A broker, for data-path requests.
    Node(Broker),
    /// The group coordinator, on its dedicated connection.
    Coordinator(Broker),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Bootstrap => f.write_str("bootstrap"),
            Target::Node(b) => write!(f, "{b}"),
            Target::Coordinator(b) => write!(f, "coordinator {b}"),
        }
    }
}

/// FindCoordinator key types (apache/kafka `FindCoordinatorRequest.CoordinatorType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CoordinatorKeyType {
    /// A consumer, classic or streams group (0).
    Group,
    /// A transactional id (1).
    Transaction,
}

impl CoordinatorKeyType {
    fn code(self) -> i8 {
        match self {
            CoordinatorKeyType::Group => 0,
            CoordinatorKeyType::Transaction => 1,
        }
    }
}

/// A request whose wire form depends on the version the connection negotiated: the transport
/// picks the highest version both sides speak and asks for the body at that version.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Request {
    /// FindCoordinator for one or more keys; more than one key needs v4+ (KIP-699 batching).
    FindCoordinator {
        /// Key type of every key.
        key_type: CoordinatorKeyType,
        /// The group ids (or transactional ids).
        keys: Vec<String>,
    },
    /// Metadata v12+ (topic ids in the answer).
    Metadata {
        /// Topics to describe; `None` means all topics.
        topics: Option<Vec<String>>,
        /// Whether the broker may auto-create the named topics.
        allow_auto_topic_creation: bool,
    },
    /// Any other request, built by the caller with the [`kafka_protocol`]
    /// message types: `body` is sent as it is at every version in `versions`, or, with a `fit`,
    /// as `fit` makes it for the version negotiated. The transport sends the highest version in
    /// `versions` that the broker speaks (its ApiVersions answer) and decodes the answer as a
    /// [`ResponseKind`] of that version, in [`Response::version`].
    ///
    /// Pick `versions` as the range whose fields your `body` sets mean the same thing in (the
    /// message's versions are in the Kafka protocol guide and in the
    /// [`Message::VERSIONS`](kafka_protocol::protocol::Message::VERSIONS) of its request type).
    /// Answers are size-checked before they are decoded, for the APIs and versions
    /// listed in the README (forged sizes are typed errors, never allocations); a request of
    /// another API, or whose `versions` and the
    /// broker's share none of those, is refused with
    /// [`TransportError::Decode`] before it is sent.
    ///
    /// ```
    /// use consumer_membership::kafka_protocol::messages::{ListOffsetsRequest, RequestKind};
    /// use consumer_membership::request::Request;
    ///
    /// let body = ListOffsetsRequest::default().with_replica_id((-1).into());
    /// let request = Request::Raw {
    ///     body: Box::new(RequestKind::ListOffsets(body)),
    ///     versions: 1..=10,
    ///     fit: None,
    /// };
    /// assert_eq!(request.api_key(), consumer_membership::kafka_protocol::messages::ApiKey::ListOffsets);
    /// ```
    Raw {
        /// The request body ([`RequestKind`]).
        body: Box<RequestKind>,
        /// The versions `body` can be sent at.
        versions: RangeInclusive<i16>,
        /// Fits a body built for the newest version to an older one (clears the fields that
        /// version does not carry); `None`: the body is valid at every version as it is.
        fit: Option<Fit>,
    },
}

/// Fits a request body to the version negotiated: defined next to the code that builds the body,
/// by whoever knows which fields each version carries.
#[derive(Clone, Copy)]
pub struct Fit(pub fn(RequestKind, i16) -> RequestKind);

impl fmt::Debug for Fit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Fit")
    }
}

impl PartialEq for Fit {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::fn_addr_eq(self.0, other.0)
    }
}

/// Why a [`Request`] cannot be built at a version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{api:?} cannot be built at version {version}: {reason}")]
pub struct BuildError {
    /// The API.
    pub api: ApiKey,
    /// The version asked for.
    pub version: i16,
    /// Why not.
    pub reason: &'static str,
}

impl Request {
    /// The API this request belongs to.
    pub fn api_key(&self) -> ApiKey {
        match self {
            Request::FindCoordinator { .. } => ApiKey::FindCoordinator,
            Request::Metadata { .. } => ApiKey::Metadata,
            Request::Raw { body, .. } => api_key_of(body),
        }
    }

    /// The versions this crate can send the request at.
    pub fn versions(&self) -> RangeInclusive<i16> {
        match self {
            // v0-3 carry a single `Key`; v4+ a `CoordinatorKeys` batch (KIP-699).
            Request::FindCoordinator { keys, .. } if keys.len() > 1 => 4..=6,
            Request::FindCoordinator { .. } => 0..=6,
            // v12 is the first with topic ids in the response (KIP-516).
            Request::Metadata { .. } => 12..=13,
            Request::Raw { versions, .. } => versions.clone(),
        }
    }

    /// The body at `version`.
    pub fn build(&self, version: i16) -> Result<RequestKind, BuildError> {
        let err = |reason| BuildError {
            api: self.api_key(),
            version,
            reason,
        };
        if !self.versions().contains(&version) {
            return Err(err("version outside the range this request supports"));
        }
        Ok(match self {
            Request::FindCoordinator { key_type, keys } => {
                let mut r = FindCoordinatorRequest::default();
                if version >= 1 {
                    r.key_type = key_type.code();
                } else if *key_type != CoordinatorKeyType::Group {
                    return Err(err("v0 only looks up group coordinators"));
                }
                if version >= 4 {
                    r.coordinator_keys = keys
                        .iter()
                        .map(|k| StrBytes::from_string(k.clone()))
                        .collect();
                } else {
                    match keys.as_slice() {
                        [k] => r.key = StrBytes::from_string(k.clone()),
                        _ => return Err(err("v0-3 carry exactly one key")),
                    }
                }
                RequestKind::FindCoordinator(r)
            }
            Request::Metadata {
                topics,
                allow_auto_topic_creation,
            } => {
                let topics = topics.as_ref().map(|ts| {
                    ts.iter()
                        .map(|t| {
                            MetadataRequestTopic::default()
                                .with_name(Some(TopicName(StrBytes::from_string(t.clone()))))
                        })
                        .collect()
                });
                RequestKind::Metadata(
                    MetadataRequest::default()
                        .with_topics(topics)
                        .with_allow_auto_topic_creation(*allow_auto_topic_creation),
                )
            }
            Request::Raw { body, fit, .. } => match fit {
                Some(Fit(fit)) => fit((**body).clone(), version),
                None => (**body).clone(),
            },
        })
    }
}

/// A response and the version it was decoded at.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// The negotiated version the request was sent (and the response decoded) at.
    pub version: i16,
    /// The decoded body.
    pub body: ResponseKind,
}

/// What a request came to: the response, or the transport's error.
pub type Reply = Result<Response, TransportError>;

/// A request the core asks the driver to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Outbound {
    /// Hand this back with the response.
    pub id: RequestId,
    /// Where to send it.
    pub target: Target,
    /// What to send.
    pub request: Request,
    /// How long to wait for the response before failing the request.
    pub timeout: Duration,
}

/// The API key of a request body.
pub fn api_key_of(body: &RequestKind) -> ApiKey {
    macro_rules! keys {
        ($($v:ident),* $(,)?) => {
            match body {
                $(RequestKind::$v(_) => ApiKey::$v,)*
                // Every variant of the pinned kafka-protocol is listed above; the enum is
                // non_exhaustive, and a newer release with more variants needs this list extended.
                #[allow(unreachable_patterns)]
                _ => unreachable!("RequestKind variant without an ApiKey"),
            }
        };
    }
    keys!(
        Produce,
        Fetch,
        ListOffsets,
        Metadata,
        OffsetCommit,
        OffsetFetch,
        FindCoordinator,
        JoinGroup,
        Heartbeat,
        LeaveGroup,
        SyncGroup,
        DescribeGroups,
        ListGroups,
        SaslHandshake,
        ApiVersions,
        CreateTopics,
        DeleteTopics,
        DeleteRecords,
        InitProducerId,
        OffsetForLeaderEpoch,
        AddPartitionsToTxn,
        AddOffsetsToTxn,
        EndTxn,
        WriteTxnMarkers,
        TxnOffsetCommit,
        DescribeAcls,
        CreateAcls,
        DeleteAcls,
        DescribeConfigs,
        AlterConfigs,
        AlterReplicaLogDirs,
        DescribeLogDirs,
        SaslAuthenticate,
        CreatePartitions,
        CreateDelegationToken,
        RenewDelegationToken,
        ExpireDelegationToken,
        DescribeDelegationToken,
        DeleteGroups,
        ElectLeaders,
        IncrementalAlterConfigs,
        AlterPartitionReassignments,
        ListPartitionReassignments,
        OffsetDelete,
        DescribeClientQuotas,
        AlterClientQuotas,
        DescribeUserScramCredentials,
        AlterUserScramCredentials,
        Vote,
        BeginQuorumEpoch,
        EndQuorumEpoch,
        DescribeQuorum,
        AlterPartition,
        UpdateFeatures,
        Envelope,
        FetchSnapshot,
        DescribeCluster,
        DescribeProducers,
        BrokerRegistration,
        BrokerHeartbeat,
        UnregisterBroker,
        DescribeTransactions,
        ListTransactions,
        AllocateProducerIds,
        ConsumerGroupHeartbeat,
        ConsumerGroupDescribe,
        ControllerRegistration,
        GetTelemetrySubscriptions,
        PushTelemetry,
        AssignReplicasToDirs,
        ListConfigResources,
        DescribeTopicPartitions,
        ShareGroupHeartbeat,
        ShareGroupDescribe,
        ShareFetch,
        ShareAcknowledge,
        AddRaftVoter,
        RemoveRaftVoter,
        UpdateRaftVoter,
        InitializeShareGroupState,
        ReadShareGroupState,
        WriteShareGroupState,
        DeleteShareGroupState,
        ReadShareGroupStateSummary,
        DescribeShareGroupOffsets,
        AlterShareGroupOffsets,
        DeleteShareGroupOffsets,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(keys: &[&str]) -> Request {
        Request::FindCoordinator {
            key_type: CoordinatorKeyType::Group,
            keys: keys.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn find_coordinator_uses_key_below_v4_and_batch_from_v4() {
        let RequestKind::FindCoordinator(r) = find(&["g"]).build(3).unwrap() else {
            panic!()
        };
        assert_eq!(r.key.as_str(), "g");
        assert!(r.coordinator_keys.is_empty());
        let RequestKind::FindCoordinator(r) = find(&["g"]).build(4).unwrap() else {
            panic!()
        };
        assert_eq!(r.key.as_str(), "");
        assert_eq!(r.coordinator_keys.len(), 1);
        assert_eq!(find(&["a", "b"]).versions(), 4..=6);
        assert!(find(&["a", "b"]).build(3).is_err());
        assert!(find(&["g"]).build(7).is_err());
    }

    #[test]
    fn api_key_of_raw_bodies() {
        let raw = Request::Raw {
            body: Box::new(RequestKind::CreateTopics(Default::default())),
            versions: 5..=7,
            fit: None,
        };
        assert_eq!(raw.api_key(), ApiKey::CreateTopics);
        assert_eq!(find(&["g"]).api_key(), ApiKey::FindCoordinator);
    }
}
