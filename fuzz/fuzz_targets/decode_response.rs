//! Arbitrary bytes as a response frame (after the size prefix) of an API at a version:
//! `transport::wire::decode_response` returns a typed result, never panics, never aborts, and
//! never allocates more than libFuzzer's `-malloc_limit_mb` at once. What decodes is handed to the
//! readers the members use on it (metadata, subscription and assignment bytes, API versions) and
//! re-encoded, neither of which may panic.
//!
//! Input: byte 0 picks the API (one of the 18 the crate walks: the 12 it reads and the 6 a
//! `Request::Raw` plausibly sends; or with the high bit any API kafka-protocol knows, which
//! `decode_response` refuses unless it walks it), byte 1 the version (in the API's range, or with the high bit any
//! `i8`, negative ones included), the rest is the frame.

#![no_main]

use bytes::Bytes;
use consumer_membership::machine::classic::subscription::{Assignment, Subscription};
use consumer_membership::machine::metadata::ClusterMetadata;
use consumer_membership::transport::wire::{self, BrokerVersions};
use kafka_protocol::messages::{ApiKey, ResponseKind};
use libfuzzer_sys::fuzz_target;

const DECODED: [ApiKey; 18] = [
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
];

fuzz_target!(|data: &[u8]| {
    let [a, v, frame @ ..] = data else {
        return;
    };
    let api = if a & 0x80 == 0 {
        DECODED[usize::from(*a) % DECODED.len()]
    } else {
        let n = ApiKey::iter().count();
        ApiKey::iter()
            .nth(usize::from(a & 0x7f) % n)
            .expect("in range")
    };
    let range = api.valid_versions();
    let version = if v & 0x80 == 0 {
        range.min + i16::from(*v) % (range.max - range.min + 1)
    } else {
        i16::from(*v as i8)
    };
    let Ok(response) = wire::decode_response(Bytes::copy_from_slice(frame), api, version) else {
        return;
    };
    match &response.body {
        ResponseKind::Metadata(_) => {
            let _ = ClusterMetadata::from_response(&response);
        }
        ResponseKind::JoinGroup(r) => {
            for m in &r.members {
                let _ = Subscription::decode(&m.metadata);
            }
        }
        ResponseKind::SyncGroup(r) => {
            let _ = Assignment::decode(&r.assignment);
        }
        ResponseKind::DescribeGroups(r) => {
            for m in r.groups.iter().flat_map(|g| &g.members) {
                let _ = Subscription::decode(&m.member_metadata);
                let _ = Assignment::decode(&m.member_assignment);
            }
        }
        ResponseKind::ApiVersions(r) => {
            let versions = BrokerVersions::from_response(r);
            for api in ApiKey::iter() {
                let _ = versions.negotiate(api, 0..=i16::MAX);
            }
        }
        _ => {}
    }
    let _ = wire::encode_response(&response.body, api, response.version, 0);
});
