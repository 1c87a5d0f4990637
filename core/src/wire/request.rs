//! The values that cross the sans-IO boundary: requests the core wants sent, where to, and the
//! responses handed back.

use std::fmt;
use std::ops::RangeInclusive;
use std::time::Duration;

use kafka_protocol::messages::{
    ApiKey, FindCoordinatorRequest, MetadataRequest, RequestKind, ResponseKind, TopicName,
    metadata_request::MetadataRequestTopic,
};
use kafka_protocol::protocol::{HeaderVersion, Message, StrBytes};

use crate::error::TransportError;
use crate::messages::{
    STREAMS_GROUP_DESCRIBE_KEY, STREAMS_GROUP_HEARTBEAT_KEY,
    STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE_KEY, StreamsGroupDescribeRequest,
    StreamsGroupDescribeResponse, StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse,
    StreamsGroupTopologyDescriptionUpdateRequest, StreamsGroupTopologyDescriptionUpdateResponse,
};

/// A Kafka API key this crate can name: every API of kafka-protocol's [`ApiKey`], and the
/// streams-group APIs of KIP-1071 ([`Api::STREAMS_GROUP_HEARTBEAT`],
/// [`Api::STREAMS_GROUP_DESCRIBE`]) and KIP-1331
/// ([`Api::STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE`]) that kafka-protocol 0.18 does not have.
///
/// It prints (`Debug` and `Display`) as kafka-protocol's `ApiKey` does:
///
/// ```
/// use consumer_membership_core::kafka_protocol::messages::ApiKey;
/// use consumer_membership_core::request::Api;
///
/// assert_eq!(format!("{:?}", Api::from(ApiKey::JoinGroup)), "JoinGroup");
/// assert_eq!(Api::STREAMS_GROUP_HEARTBEAT.to_string(), "StreamsGroupHeartbeat");
/// assert_eq!(Api::from(ApiKey::JoinGroup), ApiKey::JoinGroup);
/// assert_eq!(Api::STREAMS_GROUP_DESCRIBE.key(), 89);
/// assert_eq!(Api::STREAMS_GROUP_DESCRIBE.kafka(), None);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Api(i16);

impl Api {
    /// StreamsGroupHeartbeat (API key 88, KIP-1071).
    pub const STREAMS_GROUP_HEARTBEAT: Api = Api(STREAMS_GROUP_HEARTBEAT_KEY);
    /// StreamsGroupDescribe (API key 89, KIP-1071).
    pub const STREAMS_GROUP_DESCRIBE: Api = Api(STREAMS_GROUP_DESCRIBE_KEY);
    /// StreamsGroupTopologyDescriptionUpdate (API key 93, KIP-1331).
    pub const STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE: Api =
        Api(STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE_KEY);

    /// `Api::from(key)`, usable in constants and patterns.
    pub const fn of(key: ApiKey) -> Api {
        Api(key as i16)
    }

    /// The API whose key is `key`, if this crate can name it.
    pub fn from_key(key: i16) -> Option<Api> {
        let known = ApiKey::try_from(key).is_ok()
            || key == STREAMS_GROUP_HEARTBEAT_KEY
            || key == STREAMS_GROUP_DESCRIBE_KEY
            || key == STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE_KEY;
        known.then_some(Api(key))
    }

    /// Every API this crate can name, by key.
    pub fn all() -> impl Iterator<Item = Api> {
        let mut all: Vec<Api> = ApiKey::iter().map(Api::from).collect();
        all.extend([
            Api::STREAMS_GROUP_HEARTBEAT,
            Api::STREAMS_GROUP_DESCRIBE,
            Api::STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE,
        ]);
        all.sort();
        all.into_iter()
    }

    /// The key on the wire.
    pub fn key(self) -> i16 {
        self.0
    }

    /// The kafka-protocol [`ApiKey`], for the APIs kafka-protocol has.
    pub fn kafka(self) -> Option<ApiKey> {
        ApiKey::try_from(self.0).ok()
    }

    /// The API's name, as in the Kafka protocol guide and as kafka-protocol's `ApiKey` prints it
    /// ("JoinGroup", "StreamsGroupHeartbeat").
    pub fn name(self) -> &'static str {
        self.known_name().unwrap_or("Unknown")
    }

    fn known_name(self) -> Option<&'static str> {
        match self {
            Api::STREAMS_GROUP_HEARTBEAT => Some("StreamsGroupHeartbeat"),
            Api::STREAMS_GROUP_DESCRIBE => Some("StreamsGroupDescribe"),
            Api::STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE => {
                Some("StreamsGroupTopologyDescriptionUpdate")
            }
            _ => self.kafka().map(kafka_name),
        }
    }

    /// The versions this crate encodes requests and decodes responses of: kafka-protocol's
    /// `valid_versions()`, or the generated streams messages' `VERSIONS`.
    pub fn versions(self) -> RangeInclusive<i16> {
        let v = match self {
            Api::STREAMS_GROUP_HEARTBEAT => StreamsGroupHeartbeatRequest::VERSIONS,
            Api::STREAMS_GROUP_DESCRIBE => StreamsGroupDescribeRequest::VERSIONS,
            Api::STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE => {
                StreamsGroupTopologyDescriptionUpdateRequest::VERSIONS
            }
            _ => match self.kafka() {
                Some(k) => k.valid_versions(),
                // None: Api values are only made of keys this crate names.
                #[allow(clippy::reversed_empty_ranges)]
                None => return 0..=-1,
            },
        };
        v.min..=v.max
    }

    /// The request header version of this API's requests at `version`.
    pub fn request_header_version(self, version: i16) -> i16 {
        match self {
            Api::STREAMS_GROUP_HEARTBEAT => StreamsGroupHeartbeatRequest::header_version(version),
            Api::STREAMS_GROUP_DESCRIBE => StreamsGroupDescribeRequest::header_version(version),
            Api::STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE => {
                StreamsGroupTopologyDescriptionUpdateRequest::header_version(version)
            }
            _ => self
                .kafka()
                .map_or(2, |k| k.request_header_version(version)),
        }
    }

    /// The response header version of this API's responses at `version`.
    pub fn response_header_version(self, version: i16) -> i16 {
        match self {
            Api::STREAMS_GROUP_HEARTBEAT => StreamsGroupHeartbeatResponse::header_version(version),
            Api::STREAMS_GROUP_DESCRIBE => StreamsGroupDescribeResponse::header_version(version),
            Api::STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE => {
                StreamsGroupTopologyDescriptionUpdateResponse::header_version(version)
            }
            _ => self
                .kafka()
                .map_or(1, |k| k.response_header_version(version)),
        }
    }
}

impl From<ApiKey> for Api {
    fn from(key: ApiKey) -> Self {
        Api(key as i16)
    }
}

impl PartialEq<ApiKey> for Api {
    fn eq(&self, other: &ApiKey) -> bool {
        self.0 == *other as i16
    }
}

impl PartialEq<Api> for ApiKey {
    fn eq(&self, other: &Api) -> bool {
        *self as i16 == other.0
    }
}

impl fmt::Debug for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.known_name() {
            Some(name) => f.write_str(name),
            None => write!(f, "ApiKey({})", self.0),
        }
    }
}

impl fmt::Display for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Identifies one request the core emitted; the driver hands it back with the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub(crate) u64);

impl RequestId {
    /// The id numbered `n`, for code that consumes ids without a machine to emit them (tests of
    /// a driver or a metrics recorder). A machine answered with an id it did not emit ignores it.
    pub const fn from_raw(n: u64) -> Self {
        Self(n)
    }
}

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

impl Broker {
    /// `host:port`, the address a socket connects to.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
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
#[non_exhaustive]
pub enum Target {
    /// Any reachable bootstrap broker (FindCoordinator, Metadata).
    Bootstrap,
    /// A broker, for data-path requests.
    Node(Broker),
    /// The group coordinator, on its dedicated connection.
    Coordinator(Broker),
}

impl Target {
    /// The broker this target names; `None` for [`Target::Bootstrap`] (any bootstrap broker).
    pub fn broker(&self) -> Option<&Broker> {
        match self {
            Target::Bootstrap => None,
            Target::Node(b) | Target::Coordinator(b) => Some(b),
        }
    }
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
    /// [`Message::VERSIONS`] of its request type).
    /// Answers are size-checked before they are decoded, for the APIs and versions
    /// listed in the README (forged sizes are typed errors, never allocations); a request of
    /// another API, or whose `versions` and the
    /// broker's share none of those, is refused with
    /// [`TransportError::Decode`] before it is sent.
    ///
    /// ```
    /// use consumer_membership_core::kafka_protocol::messages::{ListOffsetsRequest, RequestKind};
    /// use consumer_membership_core::request::Request;
    ///
    /// let body = ListOffsetsRequest::default().with_replica_id((-1).into());
    /// let request = Request::Raw {
    ///     body: Box::new(RequestKind::ListOffsets(body)),
    ///     versions: 1..=10,
    ///     fit: None,
    /// };
    /// assert_eq!(request.api_key(), consumer_membership_core::kafka_protocol::messages::ApiKey::ListOffsets);
    /// assert_eq!(request.api_key().to_string(), "ListOffsets");
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
    /// StreamsGroupHeartbeat (KIP-1071): `body` is sent as it is at the version negotiated
    /// within `versions` (the request has the same fields at v0 and v1), and the answer comes
    /// back as [`ResponseBody::StreamsGroupHeartbeat`].
    StreamsGroupHeartbeat {
        /// The request body.
        body: Box<StreamsGroupHeartbeatRequest>,
        /// The versions `body` can be sent at.
        versions: RangeInclusive<i16>,
    },
    /// StreamsGroupDescribe (KIP-1071): `body` is sent as it is at the version negotiated
    /// within `versions`; the answer comes back as [`ResponseBody::StreamsGroupDescribe`].
    StreamsGroupDescribe {
        /// The request body.
        body: Box<StreamsGroupDescribeRequest>,
        /// The versions `body` can be sent at.
        versions: RangeInclusive<i16>,
    },
    /// StreamsGroupTopologyDescriptionUpdate (KIP-1331): `body` is sent as it is at the version
    /// negotiated within `versions` (Kafka 4.4 has v0 only); the answer comes back as
    /// [`ResponseBody::StreamsGroupTopologyDescriptionUpdate`].
    StreamsGroupTopologyDescriptionUpdate {
        /// The request body.
        body: Box<StreamsGroupTopologyDescriptionUpdateRequest>,
        /// The versions `body` can be sent at.
        versions: RangeInclusive<i16>,
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
    pub api: Api,
    /// The version asked for.
    pub version: i16,
    /// Why not.
    pub reason: &'static str,
}

impl Request {
    /// The API this request belongs to.
    pub fn api_key(&self) -> Api {
        match self {
            Request::FindCoordinator { .. } => ApiKey::FindCoordinator.into(),
            Request::Metadata { .. } => ApiKey::Metadata.into(),
            Request::Raw { body, .. } => request_api_of(body),
            Request::StreamsGroupHeartbeat { .. } => Api::STREAMS_GROUP_HEARTBEAT,
            Request::StreamsGroupDescribe { .. } => Api::STREAMS_GROUP_DESCRIBE,
            Request::StreamsGroupTopologyDescriptionUpdate { .. } => {
                Api::STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE
            }
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
            Request::Raw { versions, .. }
            | Request::StreamsGroupHeartbeat { versions, .. }
            | Request::StreamsGroupDescribe { versions, .. }
            | Request::StreamsGroupTopologyDescriptionUpdate { versions, .. } => versions.clone(),
        }
    }

    /// The body at `version`.
    pub fn build(&self, version: i16) -> Result<RequestBody, BuildError> {
        let err = |reason| BuildError {
            api: self.api_key(),
            version,
            reason,
        };
        if !self.versions().contains(&version) {
            return Err(err("version outside the range this request supports"));
        }
        Ok(RequestBody::Kafka(match self {
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
            Request::StreamsGroupHeartbeat { body, .. } => {
                return Ok(RequestBody::StreamsGroupHeartbeat((**body).clone()));
            }
            Request::StreamsGroupDescribe { body, .. } => {
                return Ok(RequestBody::StreamsGroupDescribe((**body).clone()));
            }
            Request::StreamsGroupTopologyDescriptionUpdate { body, .. } => {
                return Ok(RequestBody::StreamsGroupTopologyDescriptionUpdate(
                    (**body).clone(),
                ));
            }
        }))
    }
}

/// A request body as it goes on the wire: a kafka-protocol [`RequestKind`], or one of the
/// streams-group requests kafka-protocol 0.18 does not have ([`crate::messages`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RequestBody {
    /// A request of an API kafka-protocol knows.
    Kafka(RequestKind),
    /// StreamsGroupHeartbeat (API key 88).
    StreamsGroupHeartbeat(StreamsGroupHeartbeatRequest),
    /// StreamsGroupDescribe (API key 89).
    StreamsGroupDescribe(StreamsGroupDescribeRequest),
    /// StreamsGroupTopologyDescriptionUpdate (API key 93).
    StreamsGroupTopologyDescriptionUpdate(StreamsGroupTopologyDescriptionUpdateRequest),
}

impl RequestBody {
    /// The API the body belongs to.
    pub fn api(&self) -> Api {
        match self {
            RequestBody::Kafka(body) => request_api_of(body),
            RequestBody::StreamsGroupHeartbeat(_) => Api::STREAMS_GROUP_HEARTBEAT,
            RequestBody::StreamsGroupDescribe(_) => Api::STREAMS_GROUP_DESCRIBE,
            RequestBody::StreamsGroupTopologyDescriptionUpdate(_) => {
                Api::STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE
            }
        }
    }

    /// The kafka-protocol body, unless it is a streams-group request.
    pub fn kafka(&self) -> Option<&RequestKind> {
        match self {
            RequestBody::Kafka(body) => Some(body),
            _ => None,
        }
    }

    /// The kafka-protocol body, unless it is a streams-group request.
    pub fn into_kafka(self) -> Option<RequestKind> {
        match self {
            RequestBody::Kafka(body) => Some(body),
            _ => None,
        }
    }

    /// Writes the body at `version`.
    pub(crate) fn encode(&self, buf: &mut bytes::BytesMut, version: i16) -> anyhow::Result<()> {
        use kafka_protocol::protocol::Encodable;
        match self {
            RequestBody::Kafka(body) => body.encode(buf, version),
            RequestBody::StreamsGroupHeartbeat(body) => body.encode(buf, version),
            RequestBody::StreamsGroupDescribe(body) => body.encode(buf, version),
            RequestBody::StreamsGroupTopologyDescriptionUpdate(body) => body.encode(buf, version),
        }
    }

    /// Reads a body of `api` at `version`, as a broker would (the streams-group requests
    /// decode with feature `sim` only).
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn decode(api: Api, buf: &mut bytes::Bytes, version: i16) -> anyhow::Result<Self> {
        #[cfg(feature = "sim")]
        {
            use kafka_protocol::protocol::Decodable;
            match api {
                Api::STREAMS_GROUP_HEARTBEAT => {
                    let body = StreamsGroupHeartbeatRequest::decode(buf, version)?;
                    return Ok(RequestBody::StreamsGroupHeartbeat(body));
                }
                Api::STREAMS_GROUP_DESCRIBE => {
                    let body = StreamsGroupDescribeRequest::decode(buf, version)?;
                    return Ok(RequestBody::StreamsGroupDescribe(body));
                }
                Api::STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE => {
                    let body = StreamsGroupTopologyDescriptionUpdateRequest::decode(buf, version)?;
                    return Ok(RequestBody::StreamsGroupTopologyDescriptionUpdate(body));
                }
                _ => {}
            }
        }
        match api.kafka() {
            Some(k) => Ok(RequestBody::Kafka(RequestKind::decode(k, buf, version)?)),
            None => anyhow::bail!("{api:?} requests are not decoded without feature sim"),
        }
    }
}

impl From<RequestKind> for RequestBody {
    fn from(body: RequestKind) -> Self {
        RequestBody::Kafka(body)
    }
}

/// A response body as it came off the wire: a kafka-protocol [`ResponseKind`], or one of the
/// streams-group responses kafka-protocol 0.18 does not have ([`crate::messages`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ResponseBody {
    /// A response of an API kafka-protocol knows.
    Kafka(ResponseKind),
    /// StreamsGroupHeartbeat (API key 88).
    StreamsGroupHeartbeat(StreamsGroupHeartbeatResponse),
    /// StreamsGroupDescribe (API key 89).
    StreamsGroupDescribe(StreamsGroupDescribeResponse),
    /// StreamsGroupTopologyDescriptionUpdate (API key 93).
    StreamsGroupTopologyDescriptionUpdate(StreamsGroupTopologyDescriptionUpdateResponse),
}

impl ResponseBody {
    /// The API the body belongs to.
    pub fn api(&self) -> Api {
        match self {
            ResponseBody::Kafka(body) => response_api_of(body),
            ResponseBody::StreamsGroupHeartbeat(_) => Api::STREAMS_GROUP_HEARTBEAT,
            ResponseBody::StreamsGroupDescribe(_) => Api::STREAMS_GROUP_DESCRIBE,
            ResponseBody::StreamsGroupTopologyDescriptionUpdate(_) => {
                Api::STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE
            }
        }
    }

    /// The kafka-protocol body, unless it is a streams-group response.
    pub fn kafka(&self) -> Option<&ResponseKind> {
        match self {
            ResponseBody::Kafka(body) => Some(body),
            _ => None,
        }
    }

    /// The kafka-protocol body, unless it is a streams-group response.
    pub fn into_kafka(self) -> Option<ResponseKind> {
        match self {
            ResponseBody::Kafka(body) => Some(body),
            _ => None,
        }
    }

    /// Reads a body of `api` at `version`.
    pub(crate) fn decode(api: Api, buf: &mut bytes::Bytes, version: i16) -> anyhow::Result<Self> {
        use kafka_protocol::protocol::Decodable;
        Ok(match api {
            Api::STREAMS_GROUP_HEARTBEAT => ResponseBody::StreamsGroupHeartbeat(
                StreamsGroupHeartbeatResponse::decode(buf, version)?,
            ),
            Api::STREAMS_GROUP_DESCRIBE => ResponseBody::StreamsGroupDescribe(
                StreamsGroupDescribeResponse::decode(buf, version)?,
            ),
            Api::STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE => {
                ResponseBody::StreamsGroupTopologyDescriptionUpdate(
                    StreamsGroupTopologyDescriptionUpdateResponse::decode(buf, version)?,
                )
            }
            _ => match api.kafka() {
                Some(k) => ResponseBody::Kafka(ResponseKind::decode(k, buf, version)?),
                None => anyhow::bail!("unknown api key {}", api.key()),
            },
        })
    }

    /// Writes the body at `version`, as a broker would (the streams-group responses encode
    /// with feature `sim` only).
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn encode(&self, buf: &mut bytes::BytesMut, version: i16) -> anyhow::Result<()> {
        #[cfg(feature = "sim")]
        use kafka_protocol::protocol::Encodable;
        match self {
            ResponseBody::Kafka(body) => body.encode(buf, version),
            #[cfg(feature = "sim")]
            ResponseBody::StreamsGroupHeartbeat(body) => body.encode(buf, version),
            #[cfg(feature = "sim")]
            ResponseBody::StreamsGroupDescribe(body) => body.encode(buf, version),
            #[cfg(feature = "sim")]
            ResponseBody::StreamsGroupTopologyDescriptionUpdate(body) => body.encode(buf, version),
            #[cfg(not(feature = "sim"))]
            _ => anyhow::bail!(
                "{:?} responses are not encoded without feature sim",
                self.api()
            ),
        }
    }
}

impl From<ResponseKind> for ResponseBody {
    fn from(body: ResponseKind) -> Self {
        ResponseBody::Kafka(body)
    }
}

/// A response and the version it was decoded at.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// The negotiated version the request was sent (and the response decoded) at.
    pub version: i16,
    /// The decoded body.
    pub body: ResponseBody,
}

impl Response {
    /// The kafka-protocol body, unless it is a streams-group response.
    pub fn kafka(&self) -> Option<&ResponseKind> {
        self.body.kafka()
    }
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

/// Lists every API of the pinned kafka-protocol, to match on its closed enums.
macro_rules! kafka_apis {
    ($m:ident) => {
        $m!(
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
    };
}

/// The [`Api`] of a kafka-protocol body whose variant the list of [`api_key_of`] does not name
/// (one a later kafka-protocol release adds to the non-exhaustive `RequestKind` and
/// `ResponseKind`). Its key (-1) is no API's: it has no versions, so a request of it is refused
/// with [`TransportError::UnsupportedApi`](crate::error::TransportError::UnsupportedApi) before
/// anything is sent.
const UNLISTED: Api = Api(-1);

/// The API key of a request body; `None` for a variant this crate does not list (one a later
/// kafka-protocol release adds).
pub fn api_key_of(body: &RequestKind) -> Option<ApiKey> {
    request_api_of(body).kafka()
}

/// The [`Api`] of a request body ([`UNLISTED`] for a variant this crate does not list).
fn request_api_of(body: &RequestKind) -> Api {
    macro_rules! keys {
        ($($v:ident),* $(,)?) => {
            match body {
                $(RequestKind::$v(_) => ApiKey::$v.into(),)*
                // Every variant of the pinned kafka-protocol is listed; the enum is
                // non_exhaustive, and a newer release may add variants.
                #[allow(unreachable_patterns)]
                _ => UNLISTED,
            }
        };
    }
    kafka_apis!(keys)
}

/// The [`Api`] of a response body ([`UNLISTED`] for a variant this crate does not list).
fn response_api_of(body: &ResponseKind) -> Api {
    macro_rules! keys {
        ($($v:ident),* $(,)?) => {
            match body {
                $(ResponseKind::$v(_) => ApiKey::$v.into(),)*
                #[allow(unreachable_patterns)]
                _ => UNLISTED,
            }
        };
    }
    kafka_apis!(keys)
}

/// `ApiKey`'s `Debug` name, as a `&'static str`.
fn kafka_name(key: ApiKey) -> &'static str {
    macro_rules! names {
        ($($v:ident),* $(,)?) => {
            match key {
                $(ApiKey::$v => stringify!($v),)*
            }
        };
    }
    kafka_apis!(names)
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
        let RequestBody::Kafka(RequestKind::FindCoordinator(r)) = find(&["g"]).build(3).unwrap()
        else {
            panic!()
        };
        assert_eq!(r.key.as_str(), "g");
        assert!(r.coordinator_keys.is_empty());
        let RequestBody::Kafka(RequestKind::FindCoordinator(r)) = find(&["g"]).build(4).unwrap()
        else {
            panic!()
        };
        assert_eq!(r.key.as_str(), "");
        assert_eq!(r.coordinator_keys.len(), 1);
        assert_eq!(find(&["a", "b"]).versions(), 4..=6);
        assert!(find(&["a", "b"]).build(3).is_err());
        assert!(find(&["g"]).build(7).is_err());
    }

    #[test]
    fn a_body_variant_this_crate_does_not_list_is_refused_with_a_typed_error() {
        // What the body of a variant a later kafka-protocol adds maps to: no API this crate
        // names, no versions, so version negotiation refuses the request before it is sent
        // (`UnsupportedApi`).
        assert_eq!(Api::from_key(UNLISTED.key()), None);
        assert_eq!(UNLISTED.kafka(), None);
        assert!(UNLISTED.versions().is_empty());
        assert_eq!(format!("{UNLISTED:?}"), "ApiKey(-1)");
    }

    #[test]
    fn api_key_of_raw_bodies() {
        let raw = Request::Raw {
            body: Box::new(RequestKind::CreateTopics(Default::default())),
            versions: 5..=7,
            fit: None,
        };
        assert_eq!(raw.api_key(), ApiKey::CreateTopics);
        assert_eq!(
            api_key_of(&RequestKind::CreateTopics(Default::default())),
            Some(ApiKey::CreateTopics)
        );
        assert_eq!(find(&["g"]).api_key(), ApiKey::FindCoordinator);
        let streams = Request::StreamsGroupHeartbeat {
            body: Box::new(StreamsGroupHeartbeatRequest::default().with_member_epoch(3)),
            versions: 0..=1,
        };
        assert_eq!(streams.api_key(), Api::STREAMS_GROUP_HEARTBEAT);
        let RequestBody::StreamsGroupHeartbeat(body) = streams.build(1).unwrap() else {
            panic!()
        };
        assert_eq!(body.member_epoch, 3);
        let e = streams.build(2).unwrap_err();
        assert_eq!(e.api, Api::STREAMS_GROUP_HEARTBEAT);
        assert!(
            e.to_string().starts_with("StreamsGroupHeartbeat cannot"),
            "{e}"
        );
    }

    #[test]
    fn api_names_and_conversions() {
        // Every kafka-protocol API: the same key, and the name its `ApiKey` prints.
        for key in ApiKey::iter() {
            let api = Api::from(key);
            assert_eq!(api.key(), key as i16);
            assert_eq!(api.kafka(), Some(key));
            assert_eq!(api, key);
            assert_eq!(key, api);
            assert_eq!(api.name(), format!("{key:?}"));
            assert_eq!(format!("{api:?}"), format!("{key:?}"));
            assert_eq!(api.to_string(), format!("{key:?}"));
            let v = key.valid_versions();
            assert_eq!(api.versions(), v.min..=v.max);
            for version in v.min..=v.max {
                assert_eq!(
                    api.request_header_version(version),
                    key.request_header_version(version)
                );
                assert_eq!(
                    api.response_header_version(version),
                    key.response_header_version(version)
                );
            }
            assert_eq!(Api::from_key(key as i16), Some(api));
        }
        for (api, key, name, versions) in [
            (
                Api::STREAMS_GROUP_HEARTBEAT,
                88,
                "StreamsGroupHeartbeat",
                0..=1,
            ),
            (
                Api::STREAMS_GROUP_DESCRIBE,
                89,
                "StreamsGroupDescribe",
                0..=1,
            ),
            (
                Api::STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE,
                93,
                "StreamsGroupTopologyDescriptionUpdate",
                0..=0,
            ),
        ] {
            assert_eq!(api.key(), key);
            assert_eq!(api.kafka(), None);
            assert!(ApiKey::iter().all(|k| k != api));
            assert_eq!(api.name(), name);
            assert_eq!(format!("{api:?}"), name);
            assert_eq!(api.to_string(), name);
            assert_eq!(api.versions(), versions);
            // Flexible at every version (KIP-1071, KIP-1331): request header v2, response
            // header v1.
            for version in versions {
                assert_eq!(api.request_header_version(version), 2);
                assert_eq!(api.response_header_version(version), 1);
            }
            assert_eq!(Api::from_key(key), Some(api));
        }
        assert_eq!(Api::from_key(123), None);
        assert_eq!(Api::from_key(-1), None);
        assert_eq!(format!("{:?}", Api(123)), "ApiKey(123)");
        assert_eq!(Api::all().count(), ApiKey::iter().count() + 3);
        assert!(Api::all().is_sorted());
        assert!(Api::from(ApiKey::ConsumerGroupHeartbeat) < Api::STREAMS_GROUP_HEARTBEAT);
        assert_eq!(
            RequestBody::from(RequestKind::Heartbeat(Default::default())).api(),
            ApiKey::Heartbeat
        );
        assert_eq!(
            ResponseBody::StreamsGroupDescribe(Default::default()).api(),
            Api::STREAMS_GROUP_DESCRIBE
        );
        assert_eq!(
            ResponseBody::StreamsGroupTopologyDescriptionUpdate(Default::default()).api(),
            Api::STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE
        );
        let push = Request::StreamsGroupTopologyDescriptionUpdate {
            body: Box::new(
                StreamsGroupTopologyDescriptionUpdateRequest::default().with_topology_epoch(2),
            ),
            versions: 0..=0,
        };
        assert_eq!(
            push.api_key(),
            Api::STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE
        );
        let Ok(RequestBody::StreamsGroupTopologyDescriptionUpdate(body)) = push.build(0) else {
            panic!()
        };
        assert_eq!(body.topology_epoch, 2);
        assert!(push.build(1).is_err());
        assert_eq!(
            ResponseBody::from(ResponseKind::SyncGroup(Default::default())).api(),
            ApiKey::SyncGroup
        );
    }
}
