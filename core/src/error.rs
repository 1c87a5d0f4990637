//! Typed errors, and the one table that maps a Kafka error code to what the client does about it.

use std::ops::RangeInclusive;
use std::time::Duration;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::ApiKey;

use crate::partition::TopicPartition;
use crate::request::Api;

/// Any error this crate returns.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The connection to a broker failed, or its bytes made no sense.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The group coordinator refused the member for good.
    #[error(transparent)]
    Group(#[from] GroupError),
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A call the member cannot take in its state (a stale ticket, a call after `close()`).
    #[error(transparent)]
    Misuse(#[from] ApiMisuse),
    /// A commit or an offset fetch failed.
    #[error(transparent)]
    Commit(#[from] CommitError),
}

/// Misuse of the member's API by the caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApiMisuse {
    /// The ticket does not belong to the revocation the member waits for.
    #[error("this revocation ticket is not the one the member waits for")]
    UnknownTicket,
    /// The subscription has no topic.
    #[error("subscribe needs at least one topic")]
    EmptySubscription,
    /// The member was closed (`close()` was called, also while its leave is still under way) or
    /// stopped by a terminal error.
    #[error("the member is closed or stopped")]
    Stopped,
    /// Regular-expression subscriptions are evaluated by the broker, in the consumer protocol only.
    #[error("subscribing by regular expression needs group.protocol=consumer")]
    RegexNeedsConsumerProtocol,
}

/// A failure of one request on a connection. Every request in flight on a connection that fails
/// gets the same error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// No TCP connection (or no ApiVersions exchange) could be made in time.
    #[error("cannot connect to {addr}: {reason}")]
    Connect {
        /// The address tried last.
        addr: String,
        /// What went wrong on the last attempt.
        reason: String,
    },
    /// The connection broke (reset, closed by the peer, or by this client after an error).
    #[error("connection to {addr} lost: {reason}")]
    Disconnected {
        /// The peer.
        addr: String,
        /// What happened.
        reason: String,
    },
    /// A frame's size prefix exceeds the configured maximum; nothing of it was allocated.
    #[error("response frame of {size} bytes exceeds the maximum of {max} bytes")]
    FrameTooLarge {
        /// The size the peer announced.
        size: i64,
        /// The configured maximum.
        max: usize,
    },
    /// A frame's size prefix is negative or too small to hold a correlation id.
    #[error("invalid response frame size {size}")]
    InvalidFrameSize {
        /// The size the peer announced.
        size: i32,
    },
    /// The peer closed the connection in the middle of a frame.
    #[error("connection closed mid-frame after {received} of {expected} bytes")]
    TruncatedFrame {
        /// Bytes the frame announced (size prefix included).
        expected: usize,
        /// Bytes that arrived.
        received: usize,
    },
    /// A response answered no request in flight on that connection.
    #[error("response with unknown correlation id {correlation_id}")]
    UnknownCorrelationId {
        /// The id the peer sent.
        correlation_id: i32,
    },
    /// A response body could not be decoded at the version it was requested at.
    #[error("cannot decode {api:?} v{version} response: {reason}")]
    Decode {
        /// The API.
        api: Api,
        /// The version.
        version: i16,
        /// The decoder's message.
        reason: String,
    },
    /// A request could not be encoded at the negotiated version.
    #[error("cannot encode {api:?} v{version} request: {reason}")]
    Encode {
        /// The API.
        api: Api,
        /// The version.
        version: i16,
        /// Why.
        reason: String,
    },
    /// The broker and this client share no version of an API.
    #[error("{api:?}: no common version (client speaks {ours:?}, broker {broker})", broker = broker_range(.broker))]
    UnsupportedApi {
        /// The API.
        api: Api,
        /// Versions this client can send.
        ours: RangeInclusive<i16>,
        /// Versions the broker advertised, `None` when it does not serve the API at all.
        broker: Option<RangeInclusive<i16>>,
    },
    /// The ApiVersions exchange at connect failed with this Kafka error code.
    #[error("ApiVersions failed with error {code} ({name})", name = error_name(*.code))]
    ApiVersions {
        /// The Kafka error code.
        code: i16,
    },
    /// No response within the request timeout; the connection is closed, as the Java client does
    /// (a broker answers in order, so a later answer cannot overtake the missing one).
    #[error("{api:?} request timed out after {timeout:?}")]
    Timeout {
        /// The API.
        api: Api,
        /// The timeout that ran out.
        timeout: Duration,
    },
    /// SASL authentication failed (wrong credentials, mechanism not enabled, a broker that does
    /// not prove it knows the password). Not retried: the same credentials fail again.
    #[error("SASL {mechanism} authentication failed: {reason}")]
    Authentication {
        /// The mechanism.
        mechanism: &'static str,
        /// Why.
        reason: String,
    },
    /// TLS failed (untrusted or mismatched certificate, handshake, unreadable key files). Not
    /// retried.
    #[error("TLS: {reason}")]
    Tls {
        /// Why.
        reason: String,
    },
    /// The transport was shut down.
    #[error("transport closed")]
    Closed,
    /// The peer's answer is not a Kafka frame: its first bytes read as text (an HTTP server, say)
    /// or as a TLS record (a TLS listener spoken to in plaintext), and as a size prefix they
    /// exceed the maximum frame size. Nothing of it was allocated.
    #[error("the answer is not Kafka's: it starts with {start} ({guess})")]
    NotKafka {
        /// The answer's first bytes, escaped.
        start: String,
        /// What the peer looks like.
        guess: &'static str,
    },
    /// The transport's [`ClientConfig`](crate::ClientConfig) does not pass
    /// [`validate`](crate::ClientConfig::validate) (a `TcpTransport` built with `new` from such a
    /// config fails every request with this; `try_new` returns the error itself). Nothing was
    /// sent.
    #[error("invalid transport config: {0}")]
    Config(ConfigError),
    /// `error` happened on the connection to the broker at `addr`: what the TCP transport
    /// returns for failures that do not name their broker themselves (an answer that does not
    /// decode, TLS, SASL, the ApiVersions exchange). [`root`](Self::root) is `error` itself.
    #[error("broker {addr}: {error}")]
    Broker {
        /// The broker's `host:port`.
        addr: String,
        /// What went wrong there.
        error: Box<TransportError>,
    },
}

impl TransportError {
    /// Whether the request certainly never reached a broker: no connection could be made, or
    /// it could not be encoded for the broker. Any other failure leaves its fate unknown (it
    /// may have been read and acted on before the connection broke or the answer timed out).
    pub fn never_sent(&self) -> bool {
        matches!(
            self.root(),
            TransportError::Connect { .. }
                | TransportError::UnsupportedApi { .. }
                | TransportError::Encode { .. }
                | TransportError::ApiVersions { .. }
                | TransportError::Authentication { .. }
                | TransportError::Tls { .. }
                | TransportError::Config(_)
        )
    }
}

impl TransportError {
    /// The error without the [`Broker`](Self::Broker) naming where it happened.
    pub fn root(&self) -> &TransportError {
        match self {
            TransportError::Broker { error, .. } => error.root(),
            other => other,
        }
    }

    /// The broker (`host:port`, or the addresses tried) the error names, if any.
    pub fn broker(&self) -> Option<&str> {
        match self {
            TransportError::Broker { addr, .. }
            | TransportError::Connect { addr, .. }
            | TransportError::Disconnected { addr, .. } => Some(addr),
            _ => None,
        }
    }

    /// Whether the same broker will most likely fail the same way again: its answers are not
    /// Kafka's or do not decode, TLS or SASL fails, or the ApiVersions exchange is refused.
    /// Retrying cannot help unless the broker (or this client's settings) change; a refused or
    /// lost connection and a timeout are not such failures.
    pub fn is_persistent(&self) -> bool {
        matches!(
            self.root(),
            TransportError::FrameTooLarge { .. }
                | TransportError::InvalidFrameSize { .. }
                | TransportError::UnknownCorrelationId { .. }
                | TransportError::Decode { .. }
                | TransportError::ApiVersions { .. }
                | TransportError::Authentication { .. }
                | TransportError::Tls { .. }
                | TransportError::NotKafka { .. }
                | TransportError::Config(_)
        )
    }

    /// The error in a [`Broker`](Self::Broker) naming `addr`, when it is about what the peer
    /// sent or did and names no broker itself (what the TCP transport returns).
    pub fn at_broker(self, addr: &str) -> TransportError {
        let names_none = self.is_persistent()
            || matches!(
                self,
                TransportError::TruncatedFrame { .. } | TransportError::UnsupportedApi { .. }
            );
        if !names_none || matches!(self, TransportError::Broker { .. }) {
            return self;
        }
        TransportError::Broker {
            addr: addr.to_owned(),
            error: Box::new(self),
        }
    }
}

fn broker_range(r: &Option<RangeInclusive<i16>>) -> String {
    match r {
        Some(r) => format!("{r:?}"),
        None => "does not serve it".into(),
    }
}

/// The Kafka error codes this crate acts on by name, taken from kafka-protocol's
/// [`ResponseError`] (apache/kafka `Errors.java`): the one place a code is spelled out.
pub mod codes {
    use kafka_protocol::ResponseError;

    /// NONE: no error.
    pub const NONE: i16 = 0;
    /// UNKNOWN_SERVER_ERROR.
    pub const UNKNOWN_SERVER_ERROR: i16 = ResponseError::UnknownServerError.code();
    /// UNKNOWN_TOPIC_OR_PARTITION.
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = ResponseError::UnknownTopicOrPartition.code();
    /// REQUEST_TIMED_OUT.
    pub const REQUEST_TIMED_OUT: i16 = ResponseError::RequestTimedOut.code();
    /// COORDINATOR_LOAD_IN_PROGRESS.
    pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = ResponseError::CoordinatorLoadInProgress.code();
    /// COORDINATOR_NOT_AVAILABLE.
    pub const COORDINATOR_NOT_AVAILABLE: i16 = ResponseError::CoordinatorNotAvailable.code();
    /// NOT_COORDINATOR.
    pub const NOT_COORDINATOR: i16 = ResponseError::NotCoordinator.code();
    /// ILLEGAL_GENERATION.
    pub const ILLEGAL_GENERATION: i16 = ResponseError::IllegalGeneration.code();
    /// INCONSISTENT_GROUP_PROTOCOL.
    pub const INCONSISTENT_GROUP_PROTOCOL: i16 = ResponseError::InconsistentGroupProtocol.code();
    /// INVALID_GROUP_ID.
    pub const INVALID_GROUP_ID: i16 = ResponseError::InvalidGroupId.code();
    /// UNKNOWN_MEMBER_ID.
    pub const UNKNOWN_MEMBER_ID: i16 = ResponseError::UnknownMemberId.code();
    /// INVALID_SESSION_TIMEOUT.
    pub const INVALID_SESSION_TIMEOUT: i16 = ResponseError::InvalidSessionTimeout.code();
    /// REBALANCE_IN_PROGRESS.
    pub const REBALANCE_IN_PROGRESS: i16 = ResponseError::RebalanceInProgress.code();
    /// TOPIC_AUTHORIZATION_FAILED.
    pub const TOPIC_AUTHORIZATION_FAILED: i16 = ResponseError::TopicAuthorizationFailed.code();
    /// GROUP_AUTHORIZATION_FAILED.
    pub const GROUP_AUTHORIZATION_FAILED: i16 = ResponseError::GroupAuthorizationFailed.code();
    /// UNSUPPORTED_VERSION.
    pub const UNSUPPORTED_VERSION: i16 = ResponseError::UnsupportedVersion.code();
    /// INVALID_REQUEST.
    pub const INVALID_REQUEST: i16 = ResponseError::InvalidRequest.code();
    /// GROUP_ID_NOT_FOUND.
    pub const GROUP_ID_NOT_FOUND: i16 = ResponseError::GroupIdNotFound.code();
    /// MEMBER_ID_REQUIRED.
    pub const MEMBER_ID_REQUIRED: i16 = ResponseError::MemberIdRequired.code();
    /// GROUP_MAX_SIZE_REACHED.
    pub const GROUP_MAX_SIZE_REACHED: i16 = ResponseError::GroupMaxSizeReached.code();
    /// FENCED_INSTANCE_ID.
    pub const FENCED_INSTANCE_ID: i16 = ResponseError::FencedInstanceId.code();
    /// UNSTABLE_OFFSET_COMMIT.
    pub const UNSTABLE_OFFSET_COMMIT: i16 = ResponseError::UnstableOffsetCommit.code();
    /// UNKNOWN_TOPIC_ID.
    pub const UNKNOWN_TOPIC_ID: i16 = ResponseError::UnknownTopicId.code();
    /// FENCED_MEMBER_EPOCH.
    pub const FENCED_MEMBER_EPOCH: i16 = ResponseError::FencedMemberEpoch.code();
    /// UNRELEASED_INSTANCE_ID.
    pub const UNRELEASED_INSTANCE_ID: i16 = ResponseError::UnreleasedInstanceId.code();
    /// STALE_MEMBER_EPOCH.
    pub const STALE_MEMBER_EPOCH: i16 = ResponseError::StaleMemberEpoch.code();
    /// UNSUPPORTED_ASSIGNOR.
    pub const UNSUPPORTED_ASSIGNOR: i16 = ResponseError::UnsupportedAssignor.code();
    /// STREAMS_INVALID_TOPOLOGY (KIP-1071).
    pub const STREAMS_INVALID_TOPOLOGY: i16 = ResponseError::StreamsInvalidTopology.code();
    /// STREAMS_INVALID_TOPOLOGY_EPOCH (KIP-1071).
    pub const STREAMS_INVALID_TOPOLOGY_EPOCH: i16 =
        ResponseError::StreamsInvalidTopologyEpoch.code();
    /// STREAMS_TOPOLOGY_FENCED (KIP-1071).
    pub const STREAMS_TOPOLOGY_FENCED: i16 = ResponseError::StreamsTopologyFenced.code();
    /// STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED (KIP-1331, Kafka 4.4; kafka-protocol 0.18 has
    /// no name for it): the broker's topology description plugin did not store a push.
    pub const STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED: i16 = 135;
}

/// Kafka's name of an error code (`"NOT_COORDINATOR"` for 16), `"NONE"` for 0, or
/// `"UNKNOWN_CODE"`.
pub fn error_name(code: i16) -> String {
    if code == 0 {
        return "NONE".into();
    }
    let Some(e) = known(code) else {
        return "UNKNOWN_CODE".into();
    };
    // ResponseError displays Kafka's name in CamelCase: FencedInstanceId -> FENCED_INSTANCE_ID.
    let camel = e.to_string();
    let mut name = String::with_capacity(camel.len() + 8);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}

/// The error a non-zero code stands for, `None` for codes Kafka does not define.
fn known(code: i16) -> Option<ResponseError> {
    ResponseError::try_from_code(code).filter(|e| !matches!(e, ResponseError::Unknown(_)))
}

/// A terminal refusal by the group coordinator, or a response that breaks the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GroupError {
    /// GROUP_AUTHORIZATION_FAILED (30): the principal may not use this group.
    #[error("not authorized to use group {group:?} (GROUP_AUTHORIZATION_FAILED)")]
    GroupAuthorizationFailed {
        /// The group id.
        group: String,
    },
    /// STREAMS_INVALID_TOPOLOGY (130): the coordinator refuses the streams member's topology.
    #[error(
        "group {group:?}: the coordinator refuses the topology (STREAMS_INVALID_TOPOLOGY): {message:?}"
    )]
    StreamsInvalidTopology {
        /// The group id.
        group: String,
        /// The coordinator's error message.
        message: Option<String>,
    },
    /// STREAMS_INVALID_TOPOLOGY_EPOCH (131): the topology epoch is ahead of the group's while
    /// the topology differs, or otherwise invalid.
    #[error(
        "group {group:?}: invalid topology epoch (STREAMS_INVALID_TOPOLOGY_EPOCH): {message:?}"
    )]
    StreamsInvalidTopologyEpoch {
        /// The group id.
        group: String,
        /// The coordinator's error message.
        message: Option<String>,
    },
    /// STREAMS_TOPOLOGY_FENCED (132): the group runs a newer topology epoch than this member.
    #[error(
        "group {group:?}: the group runs a newer topology (STREAMS_TOPOLOGY_FENCED): {message:?}"
    )]
    StreamsTopologyFenced {
        /// The group id.
        group: String,
        /// The coordinator's error message.
        message: Option<String>,
    },
    /// The broker does not run streams groups (KIP-1071): no StreamsGroupHeartbeat API, or
    /// UNSUPPORTED_VERSION on it.
    #[error(
        "the broker does not support the streams group protocol (KIP-1071, StreamsGroupHeartbeat)"
    )]
    StreamsProtocolUnsupported,
    /// The broker does not run share groups (KIP-932): no ShareGroupHeartbeat v1, or
    /// UNSUPPORTED_VERSION on it (share groups need Kafka 4.1+ with `share.version` >= 1; GA
    /// in 4.2).
    #[error(
        "the broker does not support share groups (KIP-932, ShareGroupHeartbeat v1; Kafka 4.2+ with share.version >= 1)"
    )]
    ShareProtocolUnsupported,
    /// GROUP_ID_NOT_FOUND answering a share member's join: the group id names a group of
    /// another type (a consumer or streams group); a share group cannot have it.
    #[error("group {group:?} cannot be joined as a share group (GROUP_ID_NOT_FOUND: {message:?})")]
    GroupIdNotFound {
        /// The group id.
        group: String,
        /// The coordinator's error message.
        message: Option<String>,
    },
    /// FENCED_INSTANCE_ID (82) for the current generation: another process holds the static
    /// member's `group.instance.id`. The member stops.
    #[error(
        "group {group:?}: another member holds group.instance.id {instance_id:?} (FENCED_INSTANCE_ID); this member stops"
    )]
    FencedInstanceId {
        /// The group id.
        group: String,
        /// The instance id another process holds.
        instance_id: String,
    },
    /// UNRELEASED_INSTANCE_ID (111): a consumer-protocol static member's instance id is still held
    /// by another member, and this member's bounded recovery (leave with -2, rejoin) did not free it.
    #[error(
        "group {group:?}: group.instance.id {instance_id:?} is still held by another member (UNRELEASED_INSTANCE_ID)"
    )]
    UnreleasedInstanceId {
        /// The group id.
        group: String,
        /// The instance id.
        instance_id: String,
    },
    /// The broker does not run the KIP-848 consumer protocol for this group (UNSUPPORTED_VERSION on
    /// ConsumerGroupHeartbeat, or the API is missing). With `group.protocol=auto` the member falls
    /// back to the classic protocol instead of stopping.
    #[error(
        "the broker does not support the consumer group protocol (KIP-848); use group.protocol=classic"
    )]
    ConsumerProtocolUnsupported,
    /// `group.protocol=auto` with a regex subscription, and the broker refuses the consumer
    /// protocol: the fallback to classic cannot carry the subscription (the classic protocol has
    /// no broker-side regex), so the member stops instead of sitting unsubscribed.
    #[error(
        "group {group:?}: the broker does not support the consumer group protocol (KIP-848), and the regex subscription {pattern:?} cannot fall back to group.protocol=classic, which has no broker-side regex; subscribe by topic names or use a broker with the consumer protocol"
    )]
    RegexNeedsConsumerProtocol {
        /// The group id.
        group: String,
        /// The regex the member was subscribed with.
        pattern: String,
    },
    /// INVALID_REQUEST (42) answering a heartbeat: the coordinator refused the request itself,
    /// and its message says why (for a streams member, e.g. "Topology updates are not supported
    /// yet." when the group holds another topology at the same epoch).
    #[error("group {group:?}: {api:?} refused as INVALID_REQUEST: {message:?}")]
    InvalidRequest {
        /// The group id.
        group: String,
        /// The API.
        api: Api,
        /// The coordinator's error message.
        message: Option<String>,
    },
    /// A non-retriable error code with no more specific handling for this API.
    #[error("{api:?} failed with non-retriable error {code} ({name})", name = error_name(*.code))]
    Fatal {
        /// The API.
        api: Api,
        /// The Kafka error code.
        code: i16,
    },
    /// An error code Kafka does not define (as of this crate's kafka-protocol).
    #[error("{api:?} failed with unknown error code {code}")]
    UnknownErrorCode {
        /// The API.
        api: Api,
        /// The code.
        code: i16,
    },
    /// A response that decodes but breaks the protocol (missing fields, impossible values).
    #[error("invalid {api:?} response: {reason}")]
    InvalidResponse {
        /// The API.
        api: Api,
        /// What is wrong.
        reason: String,
    },
    /// The request could not be delivered for good (e.g. the broker does not serve the API).
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// No usable answer within the call's timeout (`default.api.timeout.ms` for a
    /// FindCoordinator lookup; the Java client's `TimeoutException`): names the API, the broker
    /// asked last and what was wrong with its last answer.
    #[error("{api:?} to broker {broker}: no usable answer within {after:?}: {reason}")]
    TimedOut {
        /// The API.
        api: Api,
        /// The broker asked last (`host:port`, `(bootstrap)` when it was the target's choice).
        broker: String,
        /// The timeout that ran out.
        after: Duration,
        /// The last attempt's failure, as text (`"none answered yet"` when none failed).
        reason: String,
        /// The last attempt's failure, when it was the transport's.
        #[source]
        transport: Option<Box<TransportError>>,
    },
    /// The member's task ended without closing (a panic, or its runtime shut down): the member
    /// is gone; its partitions are no longer heartbeated for.
    #[error("the member's task ended: {reason}")]
    TaskEnded {
        /// How it ended.
        reason: String,
    },
}

/// An invalid configuration value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value for {key}: {rule}")]
pub struct ConfigError {
    /// The Kafka config name (e.g. `bootstrap.servers`).
    pub key: &'static str,
    /// The rule the value breaks.
    pub rule: String,
}

/// What the client does about an error code in a response.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorAction {
    /// No error.
    Proceed,
    /// Retry the same request after the KIP-580 backoff.
    RetryBackoff,
    /// The coordinator moved or is gone: look it up again, then retry.
    Rediscover,
    /// A rebalance is under way: (re)join now, without backoff, keeping member id and
    /// generation.
    RejoinNow,
    /// MEMBER_ID_REQUIRED (KIP-394): take the member id the broker returned and join again now.
    AdoptMemberId,
    /// UNKNOWN_MEMBER_ID: forget member id and generation, partitions are lost, join again now.
    ResetMemberId,
    /// ILLEGAL_GENERATION: forget the generation (keep the member id), partitions are lost, join
    /// again now.
    ResetGeneration,
    /// FENCED_INSTANCE_ID: another process holds the instance id; terminal unless the answer is
    /// stale.
    Fenced,
    /// KIP-848 FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: partitions are lost; rejoin at epoch 0
    /// with the same member id.
    FencedMember,
    /// KIP-848 UNRELEASED_INSTANCE_ID: another member still holds the static instance id.
    UnreleasedInstance,
    /// STALE_MEMBER_EPOCH on a commit or fetch: retry with the latest epoch while still a member.
    StaleEpoch,
    /// UNSUPPORTED_VERSION on ConsumerGroupHeartbeat: the broker does not run the consumer protocol.
    UnsupportedProtocol,
    /// A non-fatal error the application should hear about; the member carries on.
    Report,
    /// Stop: the error is terminal (for a commit or fetch: that request failed for good).
    Fatal(GroupError),
}

/// THE table: `(api, error code)` to action, for every group API. Rows follow the Java client
/// (protocol.md §3.3 and §6.6; apache/kafka `AbstractCoordinator` response handlers,
/// `ConsumerCoordinator.OffsetCommitResponseHandler` / `OffsetFetchResponseHandler`,
/// `CoordinatorRequestManager`) except where a comment says otherwise. Whether an answer is
/// stale (sent for an older generation) is decided by the caller before it acts.
/// `group` names the group in typed errors.
pub fn classify(api: impl Into<Api>, code: i16, group: &str) -> ErrorAction {
    const CONSUMER_GROUP_HEARTBEAT: Api = Api::of(ApiKey::ConsumerGroupHeartbeat);
    const FIND_COORDINATOR: Api = Api::of(ApiKey::FindCoordinator);
    const HEARTBEAT: Api = Api::of(ApiKey::Heartbeat);
    const JOIN_GROUP: Api = Api::of(ApiKey::JoinGroup);
    const OFFSET_COMMIT: Api = Api::of(ApiKey::OffsetCommit);
    const OFFSET_FETCH: Api = Api::of(ApiKey::OffsetFetch);
    const SYNC_GROUP: Api = Api::of(ApiKey::SyncGroup);
    const STREAMS_GROUP_HEARTBEAT: Api = Api::STREAMS_GROUP_HEARTBEAT;
    const SHARE_GROUP_HEARTBEAT: Api = Api::of(ApiKey::ShareGroupHeartbeat);
    use ErrorAction::*;
    let api = api.into();
    use codes::*;
    let fatal = || Fatal(GroupError::Fatal { api, code });
    match (api, code) {
        (_, 0) => Proceed,
        // Java lets a heartbeat fail with backoff only; a member that may no longer use its group
        // would then heartbeat in vain for ever, so this crate stops it at once, typed.
        (_, GROUP_AUTHORIZATION_FAILED) => Fatal(GroupError::GroupAuthorizationFailed {
            group: group.to_owned(),
        }),
        // FindCoordinator: every retriable error (the offsets topic is being created, the
        // coordinator is loading, the broker answered before it knew) is retried after the
        // backoff (ensureCoordinatorReady, CoordinatorRequestManager.onFailedResponse).
        (FIND_COORDINATOR, c) if is_retriable(c) => RetryBackoff,
        // Requests to the coordinator: it moved or is gone (markCoordinatorUnknown). A commit
        // that timed out at the broker is treated the same way (OffsetCommitResponseHandler).
        (_, NOT_COORDINATOR | COORDINATOR_NOT_AVAILABLE) | (OFFSET_COMMIT, REQUEST_TIMED_OUT) => {
            Rediscover
        }
        // Loading: JoinGroup sleeps retry.backoff.ms and rejoins; heartbeats back off; commits
        // and fetches are retriable. SyncGroup is not special-cased in Java (it surfaces a
        // KafkaException); here it rejoins after the backoff like JoinGroup.
        (_, COORDINATOR_LOAD_IN_PROGRESS) => RetryBackoff,
        // ConsumerGroupHeartbeat (protocol.md §6.6, AbstractHeartbeatRequestManager /
        // ConsumerHeartbeatRequestManager.handleErrorResponse).
        (CONSUMER_GROUP_HEARTBEAT, FENCED_MEMBER_EPOCH | UNKNOWN_MEMBER_ID) => FencedMember,
        (CONSUMER_GROUP_HEARTBEAT, UNRELEASED_INSTANCE_ID) => UnreleasedInstance,
        (CONSUMER_GROUP_HEARTBEAT, FENCED_INSTANCE_ID) => Fenced,
        (CONSUMER_GROUP_HEARTBEAT, UNSUPPORTED_VERSION) => UnsupportedProtocol,
        // Not fatal in Java: an error event on the next poll, the member keeps its state.
        (CONSUMER_GROUP_HEARTBEAT, TOPIC_AUTHORIZATION_FAILED) => Report,
        // StreamsGroupHeartbeat (KIP-1071): the same codes mean the same as for
        // ConsumerGroupHeartbeat (StreamsGroupHeartbeatRequestManager.onErrorResponse; the
        // broker's GroupMetadataManager.streamsGroupHeartbeat throws FencedMemberEpoch /
        // UnknownMemberId / UnreleasedInstanceId / FencedInstanceId as for consumer groups).
        // UNSUPPORTED_VERSION: the cluster does not run the streams protocol; the Java client
        // makes it fatal, the caller decides (it has no classic fallback).
        (STREAMS_GROUP_HEARTBEAT, FENCED_MEMBER_EPOCH | UNKNOWN_MEMBER_ID) => FencedMember,
        (STREAMS_GROUP_HEARTBEAT, UNRELEASED_INSTANCE_ID) => UnreleasedInstance,
        (STREAMS_GROUP_HEARTBEAT, FENCED_INSTANCE_ID) => Fenced,
        (STREAMS_GROUP_HEARTBEAT, UNSUPPORTED_VERSION) => UnsupportedProtocol,
        (STREAMS_GROUP_HEARTBEAT, TOPIC_AUTHORIZATION_FAILED) => Report,
        // A topology the broker refuses (invalid, an epoch ahead of the group's, or fenced by a
        // newer one) is terminal: the same topology fails again (Java: handleFatalFailure).
        (
            STREAMS_GROUP_HEARTBEAT,
            STREAMS_INVALID_TOPOLOGY | STREAMS_INVALID_TOPOLOGY_EPOCH | STREAMS_TOPOLOGY_FENCED,
        ) => fatal(),
        // ShareGroupHeartbeat (KIP-932; GroupMetadataManager.shareGroupHeartbeat): fencing as for
        // consumer groups; GROUP_ID_NOT_FOUND for a member in the group means the group went
        // away (`getOrMaybeCreateShareGroup` without creating): rejoin at epoch 0 (the member
        // refuses it answering a join itself: the id then names a group of another type).
        (SHARE_GROUP_HEARTBEAT, FENCED_MEMBER_EPOCH | UNKNOWN_MEMBER_ID | GROUP_ID_NOT_FOUND) => {
            FencedMember
        }
        (SHARE_GROUP_HEARTBEAT, UNSUPPORTED_VERSION) => UnsupportedProtocol,
        (SHARE_GROUP_HEARTBEAT, TOPIC_AUTHORIZATION_FAILED) => Report,
        // Commits and fetches of a consumer-protocol member (CommitRequestManager).
        (OFFSET_COMMIT | OFFSET_FETCH, STALE_MEMBER_EPOCH) => StaleEpoch,
        (OFFSET_COMMIT | OFFSET_FETCH, UNKNOWN_TOPIC_ID) => RetryBackoff,
        (JOIN_GROUP, MEMBER_ID_REQUIRED) => AdoptMemberId,
        (JOIN_GROUP | SYNC_GROUP | HEARTBEAT | OFFSET_COMMIT, UNKNOWN_MEMBER_ID) => ResetMemberId,
        (JOIN_GROUP | SYNC_GROUP | HEARTBEAT | OFFSET_COMMIT, ILLEGAL_GENERATION) => {
            ResetGeneration
        }
        (JOIN_GROUP | SYNC_GROUP | HEARTBEAT | OFFSET_COMMIT, REBALANCE_IN_PROGRESS) => RejoinNow,
        (JOIN_GROUP | SYNC_GROUP | HEARTBEAT | OFFSET_COMMIT, FENCED_INSTANCE_ID) => Fenced,
        // A commit to a partition the broker does not know yet is retriable; a fetch of one is
        // not (OffsetFetchResponseHandler raises a KafkaException).
        (OFFSET_COMMIT, UNKNOWN_TOPIC_OR_PARTITION) => RetryBackoff,
        (OFFSET_FETCH, UNKNOWN_TOPIC_OR_PARTITION) => fatal(),
        (OFFSET_FETCH, UNSTABLE_OFFSET_COMMIT) => RetryBackoff,
        (_, c) if known(c).is_none() => Fatal(GroupError::UnknownErrorCode { api, code }),
        // Everything else Kafka marks retriable is retried; the rest is terminal (for JoinGroup:
        // GROUP_MAX_SIZE_REACHED, INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT,
        // INVALID_GROUP_ID, UNSUPPORTED_VERSION; for commits: OFFSET_METADATA_TOO_LARGE,
        // INVALID_COMMIT_OFFSET_SIZE, TOPIC_AUTHORIZATION_FAILED).
        (_, c) if is_retriable(c) => RetryBackoff,
        (_, _) => fatal(),
    }
}

/// Whether Kafka marks the code as retriable (a `RetriableException` in the Java client).
pub fn is_retriable(code: i16) -> bool {
    known(code).is_some_and(|e| e.is_retriable())
}

/// Why a commit or an offset fetch failed. Nothing is retried silently and nothing is reported as
/// committed unless the coordinator said so.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommitError {
    /// The group is rebalancing; commit again after the rebalance (the Java client's
    /// `RebalanceInProgressException`).
    #[error("the group is rebalancing; commit again once the member is stable")]
    RebalanceInProgress,
    /// The member is not (or no longer) in the group with the generation the commit used: the
    /// partitions may already belong to another member (`CommitFailedException`).
    #[error("commit rejected: the member is not part of the group's current generation ({reason})")]
    NotMember {
        /// What happened.
        reason: String,
    },
    /// The member's membership lease ran out ([`Reason::LeaseExpired`](crate::Reason::LeaseExpired)): no heartbeat was
    /// answered within the session timeout less one heartbeat interval, so the coordinator may
    /// have given the partitions to another member. Refused locally, without asking the
    /// coordinator, until the member is confirmed in the group again; the partitions were
    /// reported [`Event::Lost`](crate::Event::Lost) and must not be committed.
    #[error("commit refused: the membership lease expired; the partitions were reported lost")]
    LeaseExpired,
    /// Another process holds the static member's instance id.
    #[error("commit rejected: another member holds group.instance.id {instance_id:?}")]
    FencedInstanceId {
        /// The instance id.
        instance_id: String,
    },
    /// A retriable condition (coordinator moving or loading). The member retries these itself
    /// until `default.api.timeout.ms` runs out ([`TimedOut`](Self::TimedOut)); one reaches the
    /// application only from a member that stopped meanwhile.
    #[error("retriable error {code} ({name})", name = error_name(*.code))]
    Retriable {
        /// The Kafka error code.
        code: i16,
    },
    /// A partition-level or request-level error that will not go away by retrying.
    #[error("{partition:?}: error {code} ({name})", name = error_name(*.code))]
    Rejected {
        /// The partition, if the error is per partition.
        partition: Option<TopicPartition>,
        /// The Kafka error code.
        code: i16,
    },
    /// The member does not own these partitions now (never assigned, revoked or lost): a commit
    /// for them could overwrite the progress of the member that owns them. Checked at every
    /// attempt, so a commit retried across a rebalance never goes out under the new generation
    /// or epoch for partitions that moved.
    #[error("commit refused: the member does not own {partitions:?}")]
    NotOwned {
        /// The partitions of the commit the member does not own.
        partitions: Vec<TopicPartition>,
    },
    /// The member is closed (`close()` was called, or its task ended).
    #[error("the member is closed")]
    Closed,
    /// The member stopped for good on this error (see [`Event::Fatal`](crate::Event::Fatal)).
    #[error("the member stopped: {0}")]
    Fatal(GroupError),
    /// No outcome within `default.api.timeout.ms` (no coordinator reachable, or retriable
    /// errors throughout), as the Java client's `commitSync` / `committed` throw
    /// `TimeoutException`. A commit that timed out may still be applied later.
    #[error("no outcome within default.api.timeout.ms ({after:?})")]
    TimedOut {
        /// The timeout that ran out.
        after: std::time::Duration,
    },
    /// The request could not be delivered.
    #[error(transparent)]
    Transport(#[from] TransportError),
}

impl CommitError {
    /// Whether sending the same commit again may succeed.
    pub fn is_retriable(&self) -> bool {
        matches!(
            self,
            CommitError::Retriable { .. } | CommitError::Transport(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_coordinator_rows() {
        let g = "grp";
        let f = |code| classify(ApiKey::FindCoordinator, code, g);
        assert_eq!(f(0), ErrorAction::Proceed);
        assert_eq!(f(14), ErrorAction::RetryBackoff); // COORDINATOR_LOAD_IN_PROGRESS
        assert_eq!(f(15), ErrorAction::RetryBackoff); // COORDINATOR_NOT_AVAILABLE
        assert_eq!(f(16), ErrorAction::RetryBackoff); // NOT_COORDINATOR
        assert_eq!(f(7), ErrorAction::RetryBackoff); // REQUEST_TIMED_OUT
        assert_eq!(
            f(30),
            ErrorAction::Fatal(GroupError::GroupAuthorizationFailed {
                group: "grp".into()
            })
        );
        assert_eq!(
            f(24),
            ErrorAction::Fatal(GroupError::Fatal {
                api: ApiKey::FindCoordinator.into(),
                code: 24
            })
        );
        assert_eq!(
            f(-1),
            ErrorAction::Fatal(GroupError::Fatal {
                api: ApiKey::FindCoordinator.into(),
                code: -1
            })
        );
        assert_eq!(
            f(9999),
            ErrorAction::Fatal(GroupError::UnknownErrorCode {
                api: ApiKey::FindCoordinator.into(),
                code: 9999
            })
        );
    }

    #[test]
    fn coordinator_bound_requests_rediscover_on_coordinator_loss() {
        for api in [
            ApiKey::Heartbeat,
            ApiKey::JoinGroup,
            ApiKey::SyncGroup,
            ApiKey::OffsetCommit,
            ApiKey::OffsetFetch,
        ] {
            assert_eq!(classify(api, 16, "g"), ErrorAction::Rediscover, "{api:?}");
            assert_eq!(classify(api, 15, "g"), ErrorAction::Rediscover, "{api:?}");
            assert_eq!(classify(api, 14, "g"), ErrorAction::RetryBackoff, "{api:?}");
        }
        assert_eq!(
            classify(ApiKey::OffsetCommit, 7, "g"),
            ErrorAction::Rediscover
        );
    }

    /// Every row of the classic matrix (protocol.md §3.3), one assertion each.
    #[test]
    fn classic_matrix_rows() {
        use ApiKey::*;
        use ErrorAction::*;
        let f = |api, code| classify(api, code, "g");
        let fatal = |api: ApiKey, code| {
            Fatal(GroupError::Fatal {
                api: api.into(),
                code,
            })
        };
        let rows: &[(ApiKey, i16, ErrorAction)] = &[
            // NONE
            (JoinGroup, 0, Proceed),
            (SyncGroup, 0, Proceed),
            (Heartbeat, 0, Proceed),
            (OffsetCommit, 0, Proceed),
            (OffsetFetch, 0, Proceed),
            // UNKNOWN_MEMBER_ID
            (JoinGroup, 25, ResetMemberId),
            (SyncGroup, 25, ResetMemberId),
            (Heartbeat, 25, ResetMemberId),
            (OffsetCommit, 25, ResetMemberId),
            // ILLEGAL_GENERATION
            (JoinGroup, 22, ResetGeneration),
            (SyncGroup, 22, ResetGeneration),
            (Heartbeat, 22, ResetGeneration),
            (OffsetCommit, 22, ResetGeneration),
            // REBALANCE_IN_PROGRESS
            (JoinGroup, 27, RejoinNow),
            (SyncGroup, 27, RejoinNow),
            (Heartbeat, 27, RejoinNow),
            (OffsetCommit, 27, RejoinNow),
            // FENCED_INSTANCE_ID
            (JoinGroup, 82, Fenced),
            (SyncGroup, 82, Fenced),
            (Heartbeat, 82, Fenced),
            (OffsetCommit, 82, Fenced),
            // MEMBER_ID_REQUIRED
            (JoinGroup, 79, AdoptMemberId),
            // terminal JoinGroup / SyncGroup errors
            (JoinGroup, 81, fatal(JoinGroup, 81)),
            (JoinGroup, 23, fatal(JoinGroup, 23)),
            (JoinGroup, 26, fatal(JoinGroup, 26)),
            (JoinGroup, 24, fatal(JoinGroup, 24)),
            (JoinGroup, 35, fatal(JoinGroup, 35)),
            (SyncGroup, 23, fatal(SyncGroup, 23)),
            // commit / fetch specifics
            (OffsetCommit, 29, fatal(OffsetCommit, 29)),
            (OffsetFetch, 29, fatal(OffsetFetch, 29)),
            (OffsetCommit, 3, RetryBackoff),
            (OffsetFetch, 3, fatal(OffsetFetch, 3)),
            (OffsetCommit, 12, fatal(OffsetCommit, 12)),
            (OffsetCommit, 28, fatal(OffsetCommit, 28)),
            (OffsetFetch, 88, RetryBackoff),
            // anything else / unknown
            (Heartbeat, -1, fatal(Heartbeat, -1)),
            (
                JoinGroup,
                20000,
                Fatal(GroupError::UnknownErrorCode {
                    api: JoinGroup.into(),
                    code: 20000,
                }),
            ),
            (
                SyncGroup,
                20000,
                Fatal(GroupError::UnknownErrorCode {
                    api: SyncGroup.into(),
                    code: 20000,
                }),
            ),
            (
                OffsetCommit,
                20000,
                Fatal(GroupError::UnknownErrorCode {
                    api: OffsetCommit.into(),
                    code: 20000,
                }),
            ),
        ];
        for (api, code, want) in rows {
            assert_eq!(&f(*api, *code), want, "{api:?} {code}");
        }
        // ConsumerGroupHeartbeat (protocol.md §6.6) and KIP-848 commits (§8).
        let cgh = ConsumerGroupHeartbeat;
        let rows: &[(ApiKey, i16, ErrorAction)] = &[
            (cgh, 0, Proceed),
            (cgh, 16, Rediscover),
            (cgh, 15, Rediscover),
            (cgh, 14, RetryBackoff),
            (cgh, 110, FencedMember),
            (cgh, 25, FencedMember),
            (cgh, 111, UnreleasedInstance),
            (cgh, 82, Fenced),
            (cgh, 81, fatal(cgh, 81)),
            (cgh, 112, fatal(cgh, 112)),
            (cgh, 42, fatal(cgh, 42)),
            (cgh, 35, UnsupportedProtocol),
            (
                cgh,
                30,
                Fatal(GroupError::GroupAuthorizationFailed { group: "g".into() }),
            ),
            (cgh, 29, Report),
            (cgh, 128, fatal(cgh, 128)),
            (cgh, 69, fatal(cgh, 69)),
            (cgh, -1, fatal(cgh, -1)),
            (
                cgh,
                20000,
                Fatal(GroupError::UnknownErrorCode {
                    api: cgh.into(),
                    code: 20000,
                }),
            ),
            (OffsetCommit, 113, StaleEpoch),
            (OffsetFetch, 113, StaleEpoch),
            (OffsetCommit, 100, RetryBackoff),
        ];
        for (api, code, want) in rows {
            assert_eq!(&f(*api, *code), want, "{api:?} {code}");
        }
        // StreamsGroupHeartbeat (KIP-1071): ConsumerGroupHeartbeat's rows where the codes mean
        // the same, and the topology refusals terminal.
        let sgh = crate::request::Api::STREAMS_GROUP_HEARTBEAT;
        let streams_fatal = |code| Fatal(GroupError::Fatal { api: sgh, code });
        let rows: &[(i16, ErrorAction)] = &[
            (0, Proceed),
            (16, Rediscover),
            (15, Rediscover),
            (14, RetryBackoff),
            (110, FencedMember),
            (25, FencedMember),
            (111, UnreleasedInstance),
            (82, Fenced),
            (35, UnsupportedProtocol),
            (29, Report),
            (
                30,
                Fatal(GroupError::GroupAuthorizationFailed { group: "g".into() }),
            ),
            (130, streams_fatal(130)),
            (131, streams_fatal(131)),
            (132, streams_fatal(132)),
            (42, streams_fatal(42)),
            (81, streams_fatal(81)),
            (69, streams_fatal(69)),
            (
                20000,
                Fatal(GroupError::UnknownErrorCode {
                    api: sgh,
                    code: 20000,
                }),
            ),
        ];
        for (code, want) in rows {
            assert_eq!(&classify(sgh, *code, "g"), want, "{sgh:?} {code}");
        }
        assert!(
            GroupError::Fatal { api: sgh, code: 132 }
                .to_string()
                .contains("StreamsGroupHeartbeat failed with non-retriable error 132 (STREAMS_TOPOLOGY_FENCED)"),
        );
        for api in [
            JoinGroup,
            SyncGroup,
            Heartbeat,
            OffsetCommit,
            OffsetFetch,
            LeaveGroup,
        ] {
            assert_eq!(
                f(api, 30),
                Fatal(GroupError::GroupAuthorizationFailed { group: "g".into() }),
                "{api:?}"
            );
        }
    }

    #[test]
    fn error_messages_name_the_code() {
        let e = GroupError::Fatal {
            api: ApiKey::Heartbeat.into(),
            code: 82,
        };
        assert!(e.to_string().contains("FENCED_INSTANCE_ID"), "{e}");
        assert_eq!(error_name(16), "NOT_COORDINATOR");
        assert_eq!(error_name(-1), "UNKNOWN_SERVER_ERROR");
        let e = TransportError::UnsupportedApi {
            api: ApiKey::JoinGroup.into(),
            ours: 5..=9,
            broker: Some(0..=4),
        };
        assert!(
            e.to_string().contains("JoinGroup") && e.to_string().contains("0..=4"),
            "{e}"
        );
        assert_eq!(error_name(0), "NONE");
        assert_eq!(error_name(31000), "UNKNOWN_CODE");
    }
}
