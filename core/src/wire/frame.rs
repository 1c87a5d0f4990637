//! Kafka framing and version negotiation: `[i32 size][header][body]` frames, header versions per
//! API's flexible versions, and the highest version both sides speak.

use std::collections::HashMap;
use std::ops::RangeInclusive;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::error::TransportError;
use crate::request::{Api, Request, RequestBody, Response, ResponseBody};

use super::layout;

/// The API versions a broker advertised in its ApiVersions answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerVersions(HashMap<i16, RangeInclusive<i16>>);

impl BrokerVersions {
    /// Reads the advertised ranges of an ApiVersions answer.
    pub fn from_response(r: &ApiVersionsResponse) -> Self {
        Self(
            r.api_keys
                .iter()
                .filter(|k| k.min_version <= k.max_version)
                .map(|k| (k.api_key, k.min_version..=k.max_version))
                .collect(),
        )
    }

    /// Every API this crate can name ([`Api::all`]: kafka-protocol's and the streams-group ones)
    /// at every version it encodes (for in-memory peers).
    pub fn all() -> Self {
        Self(Api::all().map(|api| (api.key(), api.versions())).collect())
    }

    /// The range the broker serves for `api`.
    pub fn get(&self, api: impl Into<Api>) -> Option<RangeInclusive<i16>> {
        self.0.get(&api.into().key()).cloned()
    }

    /// Restricts `api` to `range` (`None` removes it), e.g. to model an older broker.
    pub fn set(&mut self, api: impl Into<Api>, range: Option<RangeInclusive<i16>>) {
        let key = api.into().key();
        match range {
            Some(r) => self.0.insert(key, r),
            None => self.0.remove(&key),
        };
    }

    /// The highest version of `api` in `ours`, in what this crate can encode ([`Api::versions`]),
    /// and in what the broker serves; a typed error naming the API when there is none.
    pub fn negotiate(
        &self,
        api: impl Into<Api>,
        ours: RangeInclusive<i16>,
    ) -> Result<i16, TransportError> {
        let api = api.into();
        let codec = api.versions();
        let ours = *ours.start().max(codec.start())..=*ours.end().min(codec.end());
        let broker = self.get(api);
        let Some(theirs) = broker.clone() else {
            return Err(TransportError::UnsupportedApi { api, ours, broker });
        };
        let hi = *ours.end().min(theirs.end());
        let lo = *ours.start().max(theirs.start());
        if lo > hi {
            return Err(TransportError::UnsupportedApi { api, ours, broker });
        }
        Ok(hi)
    }
}

/// Encodes a whole request frame, size prefix included.
pub fn encode_request(
    body: &RequestBody,
    api: impl Into<Api>,
    version: i16,
    correlation_id: i32,
    client_id: &str,
) -> Result<BytesMut, TransportError> {
    let api = api.into();
    let encode_err = |e: anyhow::Error| TransportError::Encode {
        api,
        version,
        reason: e.to_string(),
    };
    let header = RequestHeader::default()
        .with_request_api_key(api.key())
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_string(client_id.to_owned())));
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0); // size, patched below
    header
        .encode(&mut buf, api.request_header_version(version))
        .map_err(encode_err)?;
    body.encode(&mut buf, version).map_err(encode_err)?;
    let size = i32::try_from(buf.len() - 4).map_err(|_| TransportError::Encode {
        api,
        version,
        reason: "request larger than 2 GiB".into(),
    })?;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf)
}

/// The correlation id at the start of a response frame (after the size prefix).
pub fn peek_correlation_id(frame: &[u8]) -> Option<i32> {
    frame
        .get(..4)
        .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Decodes a response frame (without its size prefix) of `api` sent at `version`.
///
/// Every body is walked before kafka-protocol decodes it: an array count, string or bytes length
/// or tagged field size that claims more than the bytes left is a [`TransportError::Decode`]
/// before anything is allocated for it. The walk knows the responses this crate reads
/// (ApiVersions, SaslHandshake, SaslAuthenticate, FindCoordinator, Metadata, JoinGroup,
/// SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ConsumerGroupHeartbeat) and the
/// ones a [`Request::Raw`] plausibly asks for (Fetch, ListOffsets, Produce, CreateTopics,
/// DescribeGroups, ConsumerGroupDescribe), at every version kafka-protocol 0.18.0 decodes, and
/// DescribeConfigs v1-4 (the read of the group's session timeout), IncrementalAlterConfigs
/// v0-1 (group configs). An
/// answer of any other kafka-protocol API is a [`TransportError::Decode`] naming it, never
/// decoded unchecked ([`build`] refuses to send such a request in the first place).
///
/// The streams-group answers (StreamsGroupHeartbeat, StreamsGroupDescribe, v0-1;
/// StreamsGroupTopologyDescriptionUpdate, v0) are decoded by
/// the generated decoders of [`crate::messages`], which check every count and length against
/// the bytes left themselves before allocating for it.
pub fn decode_response(
    mut frame: Bytes,
    api: impl Into<Api>,
    version: i16,
) -> Result<Response, TransportError> {
    let api = api.into();
    let decode_err = |e: anyhow::Error| TransportError::Decode {
        api,
        version,
        reason: e.to_string(),
    };
    ResponseHeader::decode(&mut frame, api.response_header_version(version)).map_err(decode_err)?;
    // A broker that does not support the ApiVersions version asked for answers UNSUPPORTED_VERSION
    // in a v0 body carrying its own range (KIP-511). The error code leads the body at every
    // version, so it tells which layout follows.
    let version = if api == ApiKey::ApiVersions && frame.get(..2) == Some(&35i16.to_be_bytes()[..])
    {
        0
    } else {
        version
    };
    let decode_err = |reason: String| TransportError::Decode {
        api,
        version,
        reason,
    };
    // Every count and length is checked against the bytes left before kafka-protocol reserves
    // room for it (see `layout`): the published kafka-protocol 0.18.0 does not cap them. An API
    // or version without a layout fails here. The streams-group decoders check their own.
    if let Some(kafka) = api.kafka() {
        layout::check_sizes(kafka, version, &frame).map_err(decode_err)?;
    } else if !api.versions().contains(&version) {
        return Err(decode_err(format!(
            "{api:?} v{version} responses are not decoded"
        )));
    }
    let body =
        ResponseBody::decode(api, &mut frame, version).map_err(|e| decode_err(e.to_string()))?;
    Ok(Response { version, body })
}

/// Decodes a request frame (without size prefix) as a broker would: header, then body (feature
/// `sim`: kafka-protocol's `broker` half).
///
/// For in-process peers (`MemoryTransport`, the simulation) reading
/// frames [`encode_request`] made: unlike [`decode_response`] it does not walk the body first, so
/// it is not meant for bytes from the network.
#[cfg(any(test, feature = "sim"))]
pub fn decode_request(mut frame: Bytes) -> Result<(RequestHeader, RequestBody), TransportError> {
    let err = |e: anyhow::Error| TransportError::Decode {
        api: ApiKey::ApiVersions.into(),
        version: -1,
        reason: format!("request: {e}"),
    };
    if frame.len() < 4 {
        return Err(err(anyhow::anyhow!("frame shorter than a request header")));
    }
    let api = Api::from_key(i16::from_be_bytes([frame[0], frame[1]]))
        .ok_or_else(|| err(anyhow::anyhow!("unknown api key")))?;
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let header =
        RequestHeader::decode(&mut frame, api.request_header_version(version)).map_err(err)?;
    let body = RequestBody::decode(api, &mut frame, version).map_err(err)?;
    Ok((header, body))
}

/// Encodes a response frame (size prefix included) as a broker would (feature `sim`:
/// kafka-protocol's `broker` half).
#[cfg(any(test, feature = "sim"))]
pub fn encode_response(
    body: &ResponseBody,
    api: impl Into<Api>,
    version: i16,
    correlation_id: i32,
) -> Result<BytesMut, TransportError> {
    let api = api.into();
    let err = |e: anyhow::Error| TransportError::Encode {
        api,
        version,
        reason: e.to_string(),
    };
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0);
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut buf, api.response_header_version(version))
        .map_err(err)?;
    body.encode(&mut buf, version).map_err(err)?;
    let size = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf)
}

/// Builds `request` at the version negotiated with `versions`, among the versions whose answer
/// [`decode_response`] can walk.
///
/// A request whose answer could not be decoded safely is not sent: for an API the walk does not
/// know (a [`Request::Raw`] of, say, DeleteTopics), or a `Request::Raw` whose versions are all
/// outside the walked ones, a [`TransportError::Decode`] naming the API, at the version that would
/// have been negotiated.
pub fn build(
    request: &Request,
    versions: &BrokerVersions,
) -> Result<(Api, i16, RequestBody), TransportError> {
    let api = request.api_key();
    let ours = request.versions();
    let version = versions.negotiate(api, ours.clone())?;
    // The streams-group answers need no walk (their decoders check sizes themselves): every
    // version this crate encodes is safe to decode.
    let walked = match api.kafka() {
        Some(kafka) => layout::known_versions(kafka),
        None => Some((*api.versions().start(), *api.versions().end())),
    }
    .map(|(lo, hi)| *ours.start().max(&lo)..=*ours.end().min(&hi))
    .filter(|r| !r.is_empty());
    let version = match walked {
        Some(walked) if walked.contains(&version) => version,
        Some(walked) => versions.negotiate(api, walked)?,
        None => {
            let reason = api
                .kafka()
                .and_then(|kafka| layout::no_layout(kafka, version))
                .unwrap_or_else(|| format!("no size layout for {api:?} v{ours:?} responses"));
            return Err(TransportError::Decode {
                api,
                version,
                reason: format!("not sent: {reason}"),
            });
        }
    };
    let body = request.build(version).map_err(|e| TransportError::Encode {
        api,
        version,
        reason: e.reason.into(),
    })?;
    Ok((api, version, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::codes;
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::{RequestKind, ResponseKind};

    fn broker(ranges: &[(ApiKey, i16, i16)]) -> BrokerVersions {
        BrokerVersions::from_response(
            &ApiVersionsResponse::default().with_api_keys(
                ranges
                    .iter()
                    .map(|&(k, lo, hi)| {
                        ApiVersion::default()
                            .with_api_key(k as i16)
                            .with_min_version(lo)
                            .with_max_version(hi)
                    })
                    .collect(),
            ),
        )
    }

    #[test]
    fn negotiation_picks_the_highest_common_version() {
        let b = broker(&[(ApiKey::JoinGroup, 0, 9), (ApiKey::FindCoordinator, 0, 3)]);
        assert_eq!(b.negotiate(ApiKey::JoinGroup, 5..=9), Ok(9));
        assert_eq!(b.negotiate(ApiKey::JoinGroup, 0..=6), Ok(6));
        assert_eq!(b.negotiate(ApiKey::FindCoordinator, 0..=6), Ok(3));
        // Our range is clipped to what kafka-protocol can encode.
        assert_eq!(b.negotiate(ApiKey::JoinGroup, 5..=100), Ok(9));
    }

    #[test]
    fn negotiation_without_overlap_is_a_typed_error_naming_the_api() {
        let b = broker(&[(ApiKey::FindCoordinator, 0, 3), (ApiKey::JoinGroup, 0, 4)]);
        let e = b.negotiate(ApiKey::FindCoordinator, 4..=6).unwrap_err();
        assert_eq!(
            e,
            TransportError::UnsupportedApi {
                api: ApiKey::FindCoordinator.into(),
                ours: 4..=6,
                broker: Some(0..=3)
            }
        );
        assert!(e.to_string().contains("FindCoordinator"), "{e}");
        let e = b
            .negotiate(ApiKey::ConsumerGroupHeartbeat, 0..=1)
            .unwrap_err();
        assert!(
            matches!(e, TransportError::UnsupportedApi { broker: None, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("ConsumerGroupHeartbeat"), "{e}");
        // Inverted ranges in an answer are ignored rather than trusted.
        let b = broker(&[(ApiKey::Heartbeat, 4, 0)]);
        assert!(b.negotiate(ApiKey::Heartbeat, 0..=4).is_err());
    }

    #[test]
    fn request_frame_round_trips_through_a_broker_decoder() {
        let req = Request::FindCoordinator {
            key_type: crate::request::CoordinatorKeyType::Group,
            keys: vec!["g".into()],
        };
        for max in [3, 6] {
            let b = broker(&[(ApiKey::FindCoordinator, 0, max)]);
            let (api, version, body) = build(&req, &b).unwrap();
            let frame = encode_request(&body, api, version, 42, "cid").unwrap();
            let size = i32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
            assert_eq!(size, frame.len() - 4);
            let (header, decoded) = decode_request(frame.freeze().slice(4..)).unwrap();
            assert_eq!(header.correlation_id, 42);
            assert_eq!(header.request_api_version, max);
            assert_eq!(header.client_id.as_deref(), Some("cid"));
            assert_eq!(decoded, body);
        }
    }

    #[test]
    fn response_decoding_errors_are_typed() {
        let frame = encode_response(
            &ResponseKind::Heartbeat(Default::default()).into(),
            ApiKey::Heartbeat,
            4,
            7,
        )
        .unwrap()
        .freeze();
        let ok = decode_response(frame.slice(4..), ApiKey::Heartbeat, 4).unwrap();
        assert_eq!(ok.version, 4);
        assert_eq!(peek_correlation_id(&frame[4..]), Some(7));
        // Cut short: a typed decode error, not a panic.
        for cut in 4..frame.len() {
            let r = decode_response(frame.slice(4..cut), ApiKey::Heartbeat, 4);
            assert!(
                matches!(
                    r,
                    Err(TransportError::Decode {
                        api,
                        version: 4,
                        ..
                    }) if api == ApiKey::Heartbeat
                ),
                "cut {cut}: {r:?}"
            );
        }
    }

    #[test]
    fn forged_array_counts_are_typed_errors() {
        // An answer claiming 2^32 - 2 ApiVersion entries; kafka-protocol 0.18.0 alone would
        // reserve over 100 GiB for it and abort the process, the size walk (`layout`) refuses it.
        let mut f = BytesMut::new();
        f.put_i32(1); // correlation id (ApiVersions answers use header v0)
        f.put_i16(0); // error code
        f.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]); // compact array length
        let r = decode_response(f.freeze(), ApiKey::ApiVersions, 3);
        assert!(
            matches!(
                r,
                Err(TransportError::Decode {
                    api,
                    ..
                }) if api == ApiKey::ApiVersions
            ),
            "{r:?}"
        );
        // The same for a non-flexible (INT32 count) array.
        let mut f = BytesMut::new();
        f.put_i32(1);
        f.put_i16(0);
        f.put_i32(i32::MAX);
        let r = decode_response(f.freeze(), ApiKey::ApiVersions, 2);
        assert!(matches!(r, Err(TransportError::Decode { .. })), "{r:?}");
    }

    #[test]
    fn answers_without_a_layout_are_refused_and_their_requests_not_built() {
        // DeleteTopics has no size layout: its answer is refused, not decoded unchecked.
        let frame = encode_response(
            &ResponseKind::DeleteTopics(Default::default()).into(),
            ApiKey::DeleteTopics,
            4,
            7,
        )
        .unwrap()
        .freeze();
        let r = decode_response(frame.slice(4..), ApiKey::DeleteTopics, 4);
        assert!(
            matches!(&r, Err(TransportError::Decode { api, version: 4, reason })
                if *api == ApiKey::DeleteTopics && reason.contains("DeleteTopics")),
            "{r:?}"
        );
        // ... and such a request is not sent.
        let all = BrokerVersions::all();
        let raw = |body: RequestKind, versions| Request::Raw {
            body: Box::new(body),
            versions,
            fit: None,
        };
        let e = build(
            &raw(RequestKind::DeleteTopics(Default::default()), 0..=6),
            &all,
        )
        .unwrap_err();
        assert!(
            matches!(&e, TransportError::Decode { api, reason, .. }
                if *api == ApiKey::DeleteTopics && reason.starts_with("not sent")),
            "{e:?}"
        );
        // A walked API is negotiated within the walked versions (Fetch: v4-18): a request for
        // v0-18 goes out at 18, and not at all to a broker serving only v0-3.
        let fetch = || RequestKind::Fetch(Default::default());
        assert_eq!(build(&raw(fetch(), 0..=18), &all).unwrap().1, 18);
        let mut old = BrokerVersions::all();
        old.set(ApiKey::Fetch, Some(0..=3));
        assert!(matches!(
            build(&raw(fetch(), 0..=18), &old),
            Err(TransportError::UnsupportedApi { .. })
        ));
    }

    #[test]
    fn apiversions_falls_back_to_v0_answers() {
        // A broker that does not know ApiVersions v3 answers with a v0 body (KIP-511).
        let mut v0 = ApiVersionsResponse::default().with_error_code(codes::UNSUPPORTED_VERSION);
        v0.api_keys.push(
            ApiVersion::default()
                .with_api_key(18)
                .with_min_version(0)
                .with_max_version(2),
        );
        let frame = encode_response(
            &ResponseKind::ApiVersions(v0).into(),
            ApiKey::ApiVersions,
            0,
            1,
        )
        .unwrap()
        .freeze();
        let r = decode_response(frame.slice(4..), ApiKey::ApiVersions, 3).unwrap();
        assert_eq!(r.version, 0);
        let ResponseBody::Kafka(ResponseKind::ApiVersions(r)) = r.body else {
            panic!()
        };
        assert_eq!(r.error_code, 35);
        assert_eq!(r.api_keys[0].max_version, 2);
    }

    #[test]
    fn streams_requests_are_negotiated_and_built_like_any_other() {
        let heartbeat = Request::StreamsGroupHeartbeat {
            body: Box::new(crate::messages::StreamsGroupHeartbeatRequest::default()),
            versions: 0..=1,
        };
        // Not advertised: typed, naming the API.
        let e = build(&heartbeat, &broker(&[(ApiKey::ApiVersions, 0, 4)])).unwrap_err();
        assert_eq!(
            e,
            TransportError::UnsupportedApi {
                api: Api::STREAMS_GROUP_HEARTBEAT,
                ours: 0..=1,
                broker: None
            }
        );
        // Advertised: the highest common version, within what the generated codec speaks.
        let mut b = BrokerVersions::default();
        b.set(Api::STREAMS_GROUP_HEARTBEAT, Some(0..=7));
        let (api, version, body) = build(&heartbeat, &b).unwrap();
        assert_eq!((api, version), (Api::STREAMS_GROUP_HEARTBEAT, 1));
        assert!(matches!(body, RequestBody::StreamsGroupHeartbeat(_)));
        b.set(Api::STREAMS_GROUP_HEARTBEAT, Some(0..=0));
        assert_eq!(build(&heartbeat, &b).unwrap().1, 0);
        assert_eq!(b.negotiate(Api::STREAMS_GROUP_HEARTBEAT, 0..=5), Ok(0));
        // Every in-memory peer serves them.
        assert_eq!(
            BrokerVersions::all().get(Api::STREAMS_GROUP_DESCRIBE),
            Some(0..=1)
        );
    }

    #[cfg(feature = "sim")]
    #[test]
    fn streams_frames_round_trip() {
        use crate::messages::{StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse};
        let body = RequestBody::StreamsGroupHeartbeat(
            StreamsGroupHeartbeatRequest::default()
                .with_member_id(StrBytes::from_static_str("m"))
                .with_member_epoch(3),
        );
        for version in 0..=1 {
            let frame =
                encode_request(&body, Api::STREAMS_GROUP_HEARTBEAT, version, 9, "c").unwrap();
            let (header, decoded) = decode_request(frame.freeze().slice(4..)).unwrap();
            assert_eq!(header.request_api_key, 88);
            assert_eq!(header.request_api_version, version);
            assert_eq!(header.client_id.as_deref(), Some("c"));
            assert_eq!(decoded, body);
            let answer = ResponseBody::StreamsGroupHeartbeat(
                StreamsGroupHeartbeatResponse::default().with_member_epoch(4),
            );
            let frame = encode_response(&answer, Api::STREAMS_GROUP_HEARTBEAT, version, 9)
                .unwrap()
                .freeze();
            assert_eq!(peek_correlation_id(&frame[4..]), Some(9));
            let r =
                decode_response(frame.slice(4..), Api::STREAMS_GROUP_HEARTBEAT, version).unwrap();
            assert_eq!((r.version, &r.body), (version, &answer));
            // Cut short anywhere: a typed decode error naming the API.
            for cut in 4..frame.len() {
                let r = decode_response(frame.slice(4..cut), Api::STREAMS_GROUP_HEARTBEAT, version);
                assert!(
                    matches!(&r, Err(TransportError::Decode { api, .. }) if *api == Api::STREAMS_GROUP_HEARTBEAT),
                    "cut {cut}: {r:?}"
                );
            }
        }
        // A version the generated codec does not speak is refused before decoding.
        let r = decode_response(
            Bytes::from_static(&[0, 0, 0, 1, 0]),
            Api::STREAMS_GROUP_DESCRIBE,
            2,
        );
        assert!(
            matches!(r, Err(TransportError::Decode { version: 2, .. })),
            "{r:?}"
        );
    }
}
