//! Arbitrary bytes as a response frame (after the size prefix) of an API at a version:
//! `transport::wire::decode_response` returns a typed result, never panics, never aborts, and
//! never allocates more than libFuzzer's `-malloc_limit_mb` at once. What decodes is handed to the
//! readers the members use on it (metadata, subscription and assignment bytes, API versions) and
//! re-encoded, neither of which may panic.
//!
//! Input: byte 0 picks the API (one of the 18 the crate walks: the 12 it reads and the 6 a
//! `Request::Raw` plausibly sends, or the two streams-group APIs, whose generated decoders check
//! sizes themselves; or with the high bit any API the crate names, which `decode_response`
//! refuses unless it can decode it safely), byte 1 the version (in the API's range, or with the
//! high bit any `i8`, negative ones included), the rest is the frame.

#![no_main]

use bytes::Bytes;
use consumer_membership::machine::classic::subscription::{Assignment, Subscription};
use consumer_membership::machine::metadata::ClusterMetadata;
use consumer_membership::request::Api;
use consumer_membership::transport::wire::{self, BrokerVersions};
use kafka_protocol::messages::{ApiKey, ResponseKind};
use libfuzzer_sys::fuzz_target;

const DECODED: [Api; 20] = [
    Api::of(ApiKey::ApiVersions),
    Api::of(ApiKey::SaslHandshake),
    Api::of(ApiKey::SaslAuthenticate),
    Api::of(ApiKey::FindCoordinator),
    Api::of(ApiKey::Metadata),
    Api::of(ApiKey::JoinGroup),
    Api::of(ApiKey::SyncGroup),
    Api::of(ApiKey::Heartbeat),
    Api::of(ApiKey::LeaveGroup),
    Api::of(ApiKey::OffsetCommit),
    Api::of(ApiKey::OffsetFetch),
    Api::of(ApiKey::ConsumerGroupHeartbeat),
    Api::of(ApiKey::Fetch),
    Api::of(ApiKey::ListOffsets),
    Api::of(ApiKey::Produce),
    Api::of(ApiKey::CreateTopics),
    Api::of(ApiKey::DescribeGroups),
    Api::of(ApiKey::ConsumerGroupDescribe),
    Api::STREAMS_GROUP_HEARTBEAT,
    Api::STREAMS_GROUP_DESCRIBE,
];

fuzz_target!(|data: &[u8]| {
    let [a, v, frame @ ..] = data else {
        return;
    };
    let api = if a & 0x80 == 0 {
        DECODED[usize::from(*a) % DECODED.len()]
    } else {
        let n = Api::all().count();
        Api::all()
            .nth(usize::from(a & 0x7f) % n)
            .expect("in range")
    };
    let range = api.versions();
    let (min, max) = (*range.start(), *range.end());
    let version = if v & 0x80 == 0 {
        min + i16::from(*v) % (max - min + 1)
    } else {
        i16::from(*v as i8)
    };
    let Ok(response) = wire::decode_response(Bytes::copy_from_slice(frame), api, version) else {
        return;
    };
    match response.kafka() {
        Some(ResponseKind::Metadata(_)) => {
            let _ = ClusterMetadata::from_response(&response);
        }
        Some(ResponseKind::JoinGroup(r)) => {
            for m in &r.members {
                let _ = Subscription::decode(&m.metadata);
            }
        }
        Some(ResponseKind::SyncGroup(r)) => {
            let _ = Assignment::decode(&r.assignment);
        }
        Some(ResponseKind::DescribeGroups(r)) => {
            for m in r.groups.iter().flat_map(|g| &g.members) {
                let _ = Subscription::decode(&m.member_metadata);
                let _ = Assignment::decode(&m.member_assignment);
            }
        }
        Some(ResponseKind::ApiVersions(r)) => {
            let versions = BrokerVersions::from_response(r);
            for api in Api::all() {
                let _ = versions.negotiate(api, 0..=i16::MAX);
            }
        }
        _ => {}
    }
    let _ = wire::encode_response(&response.body, api, response.version, 0);
});
