//! Forged sizes in every response consumer-membership decodes, through its public API
//! (`transport::wire::decode_response` and `TcpTransport` against an in-process fake broker),
//! with the published kafka-protocol 0.18.0 linked unpatched: each is a typed
//! `TransportError::Decode`, never an abort and never an allocation out of proportion to the
//! bytes received. The same for the answers to `Request::Raw` requests of the APIs it walks
//! (Fetch, ListOffsets, Produce, CreateTopics, DescribeGroups, ConsumerGroupDescribe), a typed
//! refusal for any other API, and forged consumer-protocol bytes (JoinGroup member metadata,
//! SyncGroup assignment) read by `Subscription::decode`, `Assignment::decode` and a classic
//! member driven through the sans-IO machine.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};

use bytes::Bytes;
use consumer_membership::config::{GroupConfig, GroupProtocol};
use consumer_membership::machine::classic::ClassicMember;
use consumer_membership::machine::classic::subscription::{
    Assignment, ProtocolError, Subscription,
};
use consumer_membership::request::{Broker, Request, RequestBody, ResponseBody, Target};
use consumer_membership::transport::wire::BrokerVersions;
use consumer_membership::transport::{TcpTransport, Transport, wire};
use consumer_membership::{ClientConfig, GroupError, TransportError};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::metadata_response::{
    MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, FindCoordinatorResponse, JoinGroupResponse,
    MetadataResponse, RequestKind, ResponseKind, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use uuid::Uuid;

/// A count or length of 2^32 - 2 (a compact size is the value + 1).
const HUGE_VARINT: [u8; 5] = [0xff, 0xff, 0xff, 0xff, 0x0f];
/// The 12-byte ApiVersions v3 answer (correlation id, error code, compact array length)
/// claiming 2^32 - 2 entries.
const TWELVE_BYTES: [u8; 12] = [0, 0, 0, 1, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0];

/// A response body written field by field.
#[derive(Default, Clone)]
struct Body(Vec<u8>);

impl Body {
    fn put(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
    fn i16(self, x: i16) -> Self {
        self.put(&x.to_be_bytes())
    }
    fn i32(self, x: i32) -> Self {
        self.put(&x.to_be_bytes())
    }
    /// `n` zero bytes (fixed-size fields).
    fn zeros(self, n: usize) -> Self {
        self.put(&vec![0; n])
    }
    /// One-byte unsigned varint.
    fn uv(self, x: u8) -> Self {
        assert!(x < 0x80);
        self.put(&[x])
    }
    fn huge(self) -> Self {
        self.put(&HUGE_VARINT)
    }
}

fn b() -> Body {
    Body::default()
}

/// One forged answer: the API and version it answers, what is forged, the body.
#[derive(Clone)]
struct Case {
    api: ApiKey,
    version: i16,
    forged: &'static str,
    body: Body,
}

fn case(api: ApiKey, version: i16, forged: &'static str, body: Body) -> Case {
    Case {
        api,
        version,
        forged,
        body,
    }
}

/// At least one forged size per decoded API; INT32 and compact array counts, STRING and
/// COMPACT_STRING lengths, BYTES and COMPACT_BYTES lengths, nested arrays, tagged fields.
fn cases() -> Vec<Case> {
    use ApiKey::*;
    let max = i32::MAX;
    vec![
        case(ApiVersions, 3, "compact array", b().i16(0).huge()),
        case(ApiVersions, 2, "array", b().i16(0).i32(max)),
        case(
            ApiVersions,
            4,
            "compact array in tagged SupportedFeatures",
            b().i16(0).uv(1).zeros(4).uv(1).uv(0).uv(1).huge(),
        ),
        case(SaslHandshake, 1, "array", b().i16(0).i32(max)),
        case(SaslHandshake, 0, "string", b().i16(0).i32(1).i16(i16::MAX)),
        case(SaslAuthenticate, 1, "bytes", b().i16(0).i16(-1).i32(max)),
        case(
            SaslAuthenticate,
            2,
            "compact bytes",
            b().i16(0).uv(0).huge(),
        ),
        case(SaslAuthenticate, 2, "compact string", b().i16(0).huge()),
        case(FindCoordinator, 2, "string", b().zeros(6).i16(i16::MAX)),
        case(FindCoordinator, 6, "compact array", b().zeros(4).huge()),
        case(
            FindCoordinator,
            4,
            "compact string",
            b().zeros(4).uv(2).huge(),
        ),
        case(Metadata, 8, "array", b().zeros(4).i32(max)),
        case(Metadata, 12, "compact array", b().zeros(4).huge()),
        case(
            Metadata,
            12,
            "nested compact INT32 array (replica nodes)",
            b().zeros(4)
                .uv(1)
                .uv(0)
                .zeros(4)
                .uv(2)
                .zeros(2)
                .uv(1)
                .zeros(17)
                .uv(2)
                .zeros(14)
                .huge(),
        ),
        case(
            JoinGroup,
            5,
            "array",
            b().zeros(10).i16(0).i16(0).i16(0).i32(max),
        ),
        case(
            JoinGroup,
            9,
            "compact array",
            b().zeros(10).uv(0).uv(1).uv(1).zeros(1).uv(1).huge(),
        ),
        case(
            JoinGroup,
            5,
            "bytes (member metadata)",
            b().zeros(10).zeros(6).i32(1).i16(0).i16(-1).i32(max),
        ),
        case(SyncGroup, 3, "bytes", b().zeros(6).i32(max)),
        case(
            SyncGroup,
            5,
            "compact bytes",
            b().zeros(6).uv(0).uv(0).huge(),
        ),
        case(
            Heartbeat,
            4,
            "tagged field size",
            b().zeros(6).uv(1).uv(0).huge(),
        ),
        case(LeaveGroup, 3, "array", b().zeros(6).i32(max)),
        case(LeaveGroup, 5, "compact array", b().zeros(6).huge()),
        case(OffsetCommit, 7, "array", b().zeros(4).i32(max)),
        case(OffsetCommit, 9, "compact array", b().zeros(4).huge()),
        case(
            OffsetCommit,
            10,
            "nested compact array (partitions)",
            b().zeros(4).uv(2).zeros(16).huge(),
        ),
        case(OffsetFetch, 5, "array", b().zeros(4).i32(max)),
        case(OffsetFetch, 9, "compact array", b().zeros(4).huge()),
        case(
            OffsetFetch,
            7,
            "compact string (partition metadata)",
            b().zeros(4).uv(2).uv(1).uv(2).zeros(16).huge(),
        ),
        case(
            ConsumerGroupHeartbeat,
            1,
            "compact array (assignment)",
            b().zeros(6).uv(0).uv(0).zeros(8).put(&[1]).huge(),
        ),
        case(
            ConsumerGroupHeartbeat,
            0,
            "compact string",
            b().zeros(6).huge(),
        ),
        // The answers to `Request::Raw` requests the walk knows.
        case(Fetch, 11, "array", b().zeros(10).i32(max)),
        case(Fetch, 12, "compact array", b().zeros(10).huge()),
        case(
            Fetch,
            13,
            "compact bytes (records)",
            b().zeros(10)
                .uv(2)
                .zeros(16)
                .uv(2)
                .zeros(30)
                .uv(0)
                .zeros(4)
                .huge(),
        ),
        case(ListOffsets, 5, "array", b().zeros(4).i32(max)),
        case(
            ListOffsets,
            6,
            "nested compact array (partitions)",
            b().zeros(4).uv(2).uv(1).huge(),
        ),
        case(Produce, 8, "array", b().i32(max)),
        case(Produce, 9, "compact array", b().huge()),
        case(CreateTopics, 4, "array", b().zeros(4).i32(max)),
        case(CreateTopics, 7, "compact array", b().zeros(4).huge()),
        case(DescribeGroups, 4, "array", b().zeros(4).i32(max)),
        case(
            DescribeGroups,
            3,
            "bytes (member metadata)",
            b().zeros(4).i32(1).zeros(10).i32(1).zeros(6).i32(max),
        ),
        case(DescribeGroups, 5, "compact array", b().zeros(4).huge()),
        case(
            ConsumerGroupDescribe,
            0,
            "compact array",
            b().zeros(4).huge(),
        ),
    ]
}

/// The frame (without size prefix) answering `case`: correlation id, the header's tagged
/// fields when the header is flexible, the body.
fn frame(c: &Case, correlation_id: i32) -> Vec<u8> {
    let mut f = correlation_id.to_be_bytes().to_vec();
    if c.api.response_header_version(c.version) >= 1 {
        f.push(0);
    }
    f.extend_from_slice(&c.body.0);
    f
}

fn assert_forged(c: &Case, r: Result<impl std::fmt::Debug, TransportError>) {
    // Over TCP the error names the broker: `TransportError::Broker` around the decode error.
    match r.as_ref().map_err(TransportError::root) {
        Err(TransportError::Decode { api, reason, .. })
            if *api == c.api && reason.contains("forged size") =>
        {
            println!("{:?} v{} {}: {reason}", c.api, c.version, c.forged)
        }
        other => panic!(
            "{:?} v{} {}: expected a typed decode error, got {other:?}",
            c.api, c.version, c.forged
        ),
    }
}

#[test]
fn kafka_protocol_is_the_published_crate_unpatched() {
    let manifest = include_str!("../Cargo.toml");
    assert!(!manifest.contains("[patch"), "publish-check must not patch");
    let lock = include_str!("../Cargo.lock");
    let entry = lock
        .split("[[package]]")
        .find(|p| p.contains("name = \"kafka-protocol\""))
        .expect("kafka-protocol in Cargo.lock");
    assert!(entry.contains("version = \"0.18.0\""), "{entry}");
    assert!(
        entry.contains("source = \"registry+https://github.com/rust-lang/crates.io-index\""),
        "{entry}"
    );
}

#[test]
fn the_twelve_byte_answer_is_a_typed_error() {
    let r = wire::decode_response(Bytes::from_static(&TWELVE_BYTES), ApiKey::ApiVersions, 3);
    assert_forged(&case(ApiKey::ApiVersions, 3, "12 bytes", b()), r);
}

#[test]
fn forged_sizes_decode_to_typed_errors() {
    let cases = cases();
    for c in &cases {
        assert_forged(
            c,
            wire::decode_response(Bytes::from(frame(c, 1)), c.api, c.version),
        );
    }
    let mut apis: Vec<_> = cases.iter().map(|c| c.api as i16).collect();
    apis.dedup();
    assert_eq!(
        apis.len(),
        DECODED.len(),
        "one case per decoded API at least"
    );
}

/// Every response consumer-membership decodes: the ones it reads itself, then the answers to
/// `Request::Raw` requests it walks.
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

struct Counting;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

// SAFETY: every call is forwarded to `System` unchanged; `note` only updates a thread-local
// counter and does not allocate. `realloc` and `alloc_zeroed` keep their default bodies, which
// allocate through `alloc` (and so are counted).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract for `alloc` is passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn forged_sizes_at_every_offset_of_every_version_stay_bounded() {
    let forged: [&[u8]; 4] = [
        &[0x7f, 0xff, 0xff, 0xff],
        &[0x7f, 0xff],
        &HUGE_VARINT,
        &[0x80, 0x80, 0x80, 0x80, 0x08],
    ];
    let mut decodes = 0;
    for api in DECODED {
        let range = api.valid_versions();
        for v in range.min..=range.max {
            let body = default_response(api).into();
            let sample = wire::encode_response(&body, api, v, 1).expect("encode");
            let sample = &sample[4..];
            for at in 0..sample.len() {
                for f in forged {
                    let mut bytes = sample.to_vec();
                    for (i, x) in f.iter().enumerate() {
                        if let Some(slot) = bytes.get_mut(at + i) {
                            *slot = *x;
                        }
                    }
                    let n = bytes.len();
                    LARGEST.with(|l| l.set(0));
                    let r = wire::decode_response(Bytes::from(bytes), api, v);
                    let largest = LARGEST.with(Cell::get);
                    assert!(
                        r.is_ok() || matches!(r, Err(TransportError::Decode { .. })),
                        "{api:?} v{v}: {r:?}"
                    );
                    assert!(
                        largest <= 64 * 1024 + 1024 * n,
                        "{api:?} v{v}: {n} bytes allocated {largest} at once"
                    );
                    decodes += 1;
                }
            }
        }
    }
    println!("{decodes} forged responses decoded within bounds");
}

/// The default body of `$kind` (`RequestKind` or `ResponseKind`) for a decoded API.
macro_rules! default_body {
    ($kind:ident, $api:expr) => {
        match $api {
            ApiKey::ApiVersions => $kind::ApiVersions(Default::default()),
            ApiKey::SaslHandshake => $kind::SaslHandshake(Default::default()),
            ApiKey::SaslAuthenticate => $kind::SaslAuthenticate(Default::default()),
            ApiKey::FindCoordinator => $kind::FindCoordinator(Default::default()),
            ApiKey::Metadata => $kind::Metadata(Default::default()),
            ApiKey::JoinGroup => $kind::JoinGroup(Default::default()),
            ApiKey::SyncGroup => $kind::SyncGroup(Default::default()),
            ApiKey::Heartbeat => $kind::Heartbeat(Default::default()),
            ApiKey::LeaveGroup => $kind::LeaveGroup(Default::default()),
            ApiKey::OffsetCommit => $kind::OffsetCommit(Default::default()),
            ApiKey::OffsetFetch => $kind::OffsetFetch(Default::default()),
            ApiKey::ConsumerGroupHeartbeat => $kind::ConsumerGroupHeartbeat(Default::default()),
            ApiKey::Fetch => $kind::Fetch(Default::default()),
            ApiKey::ListOffsets => $kind::ListOffsets(Default::default()),
            ApiKey::Produce => $kind::Produce(Default::default()),
            ApiKey::CreateTopics => $kind::CreateTopics(Default::default()),
            ApiKey::DescribeGroups => $kind::DescribeGroups(Default::default()),
            ApiKey::ConsumerGroupDescribe => $kind::ConsumerGroupDescribe(Default::default()),
            other => panic!("{other:?} is not decoded by consumer-membership"),
        }
    };
}

fn default_response(api: ApiKey) -> ResponseKind {
    default_body!(ResponseKind, api)
}

fn default_request(api: ApiKey) -> RequestKind {
    default_body!(RequestKind, api)
}

/// A broker that answers ApiVersions truthfully for `c.api` at exactly `c.version` (unless
/// ApiVersions is the forged answer) and every other request with the forged frame.
async fn fake_broker(listener: TcpListener, c: Case) {
    let Ok((mut s, _)) = listener.accept().await else {
        return;
    };
    loop {
        let mut size = [0u8; 4];
        if s.read_exact(&mut size).await.is_err() {
            return;
        }
        let mut req = vec![0u8; i32::from_be_bytes(size) as usize];
        if s.read_exact(&mut req).await.is_err() {
            return;
        }
        let api = i16::from_be_bytes([req[0], req[1]]);
        let version = i16::from_be_bytes([req[2], req[3]]);
        let correlation_id = i32::from_be_bytes([req[4], req[5], req[6], req[7]]);
        let answer = if api == ApiKey::ApiVersions as i16 && c.api != ApiKey::ApiVersions {
            let keys =
                [(ApiKey::ApiVersions, 0, 4), (c.api, c.version, c.version)].map(|(k, lo, hi)| {
                    ApiVersion::default()
                        .with_api_key(k as i16)
                        .with_min_version(lo)
                        .with_max_version(hi)
                });
            let r = ApiVersionsResponse::default().with_api_keys(keys.to_vec());
            let f = wire::encode_response(
                &ResponseKind::ApiVersions(r).into(),
                ApiKey::ApiVersions,
                version,
                correlation_id,
            )
            .expect("encode");
            f.to_vec()
        } else {
            let f = frame(&c, correlation_id);
            let mut out = (f.len() as i32).to_be_bytes().to_vec();
            out.extend_from_slice(&f);
            out
        };
        if s.write_all(&answer).await.is_err() {
            return;
        }
    }
}

#[tokio::test]
async fn forged_answers_over_tcp_are_typed_errors() {
    let timeout = Duration::from_secs(5);
    for c in cases() {
        // ApiVersions is the connection's first exchange, at the highest version the client
        // knows: only its flexible-version cases have the layout of that version.
        if c.api == ApiKey::ApiVersions && c.version < 3 {
            continue;
        }
        let body = if c.api == ApiKey::ApiVersions {
            None
        } else {
            let body = default_request(c.api);
            if wire::encode_request(&body.clone().into(), c.api, c.version, 0, "").is_err() {
                // A default body of this API is not valid at this version; the case is covered
                // by `forged_sizes_decode_to_typed_errors`.
                println!("{:?} v{}: no default request, skipped", c.api, c.version);
                continue;
            }
            Some(body)
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let config = ClientConfig::new(&addr.to_string()).expect("config");
        let transport = TcpTransport::new(config);
        let target = Target::Node(Broker {
            node_id: 1,
            host: addr.ip().to_string(),
            port: addr.port(),
        });
        let server = tokio::spawn(fake_broker(listener, c.clone()));
        let r = match body {
            None => transport.broker_versions(&target).await.map(|_| ()),
            Some(body) => {
                let request = Request::Raw {
                    body: Box::new(body),
                    versions: c.version..=c.version,
                    fit: None,
                };
                transport.send(target, request, timeout).await.map(|_| ())
            }
        };
        server.abort();
        assert_forged(&c, r);
    }
}

/// The answer of an API the walk has no layout for (DeleteTopics here) is refused with a typed
/// error naming it, never decoded unchecked; and such a `Request::Raw` is not even sent.
#[tokio::test]
async fn answers_of_apis_without_a_layout_are_refused() {
    let api = ApiKey::DeleteTopics;
    let forged = case(api, 4, "compact array", b().zeros(4).huge());
    let r = wire::decode_response(Bytes::from(frame(&forged, 1)), api, 4);
    match &r {
        Err(TransportError::Decode { api: a, reason, .. })
            if *a == api && reason.contains("DeleteTopics") => {}
        other => panic!("expected a typed refusal, got {other:?}"),
    }
    // A well-formed answer is refused just the same.
    let valid = wire::encode_response(
        &ResponseKind::DeleteTopics(Default::default()).into(),
        api,
        4,
        1,
    )
    .expect("encode");
    let r = wire::decode_response(valid.freeze().slice(4..), api, 4);
    assert!(
        matches!(
            r,
            Err(TransportError::Decode { api: a, .. }) if a == ApiKey::DeleteTopics
        ),
        "{r:?}"
    );

    // Through TcpTransport, against a broker that advertises DeleteTopics v4.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let transport = TcpTransport::new(ClientConfig::new(&addr.to_string()).expect("config"));
    let target = Target::Node(Broker {
        node_id: 1,
        host: addr.ip().to_string(),
        port: addr.port(),
    });
    let server = tokio::spawn(fake_broker(listener, forged));
    let request = Request::Raw {
        body: Box::new(RequestKind::DeleteTopics(Default::default())),
        versions: 4..=4,
        fit: None,
    };
    let r = transport
        .send(target, request, Duration::from_secs(5))
        .await;
    server.abort();
    match &r {
        Err(TransportError::Decode { api: a, reason, .. })
            if *a == api && reason.starts_with("not sent") && reason.contains("DeleteTopics") =>
        {
            println!("Raw DeleteTopics: {reason}")
        }
        other => panic!("expected a typed refusal before sending, got {other:?}"),
    }
}

/// Consumer-protocol bytes (v3) whose first array, the topics of a subscription or the assigned
/// topics of an assignment, claims `count` entries with nothing after it.
fn forged_consumer_protocol(count: i32) -> Bytes {
    Bytes::from(b().i16(3).i32(count).0)
}

fn assert_malformed(what: &str, r: Result<impl std::fmt::Debug, ProtocolError>) {
    match r {
        Err(ProtocolError::Malformed { reason, .. }) if reason.contains("forged size") => {
            println!("{what}: {reason}")
        }
        Err(ProtocolError::Malformed { reason, .. }) if reason.contains("negative") => {
            println!("{what}: {reason}")
        }
        other => panic!("{what}: expected a typed ProtocolError, got {other:?}"),
    }
}

#[test]
fn forged_consumer_protocol_counts_are_typed_errors() {
    // 2^31 - 1, and 2^31 (which an INT32 reads as negative).
    for count in [i32::MAX, i32::MIN] {
        let forged = forged_consumer_protocol(count);
        LARGEST.with(|l| l.set(0));
        assert_malformed("subscription", Subscription::decode(&forged));
        assert_malformed("assignment", Assignment::decode(&forged));
        let largest = LARGEST.with(Cell::get);
        assert!(largest <= 64 * 1024, "allocated {largest} bytes at once");
    }
    // The same bytes inside well-formed JoinGroup and SyncGroup answers: the answers decode (the
    // metadata and assignment are opaque bytes to them), their contents do not.
    let forged = forged_consumer_protocol(i32::MAX);
    let join = JoinGroupResponse::default().with_members(vec![
        JoinGroupResponseMember::default().with_metadata(forged.clone()),
    ]);
    let sync = SyncGroupResponse::default().with_assignment(forged);
    for (api, body) in [
        (ApiKey::JoinGroup, ResponseKind::JoinGroup(join).into()),
        (ApiKey::SyncGroup, ResponseKind::SyncGroup(sync).into()),
    ] {
        let range = api.valid_versions();
        for v in range.min..=range.max {
            let f = wire::encode_response(&body, api, v, 1).expect("encode");
            let r = wire::decode_response(f.freeze().slice(4..), api, v).expect("decode");
            match r.body {
                ResponseBody::Kafka(ResponseKind::JoinGroup(j)) => assert_malformed(
                    "member metadata",
                    Subscription::decode(&j.members[0].metadata),
                ),
                ResponseBody::Kafka(ResponseKind::SyncGroup(s)) => {
                    assert_malformed("assignment", Assignment::decode(&s.assignment))
                }
                other => panic!("{other:?}"),
            }
        }
    }
}

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_owned())
}

/// A classic member, driven through the sans-IO machine as a dependent's own driver would (every
/// answer encoded and decoded by `wire`), leads a group whose other member sent forged metadata,
/// then gets a forged assignment: the other member is assigned nothing, and the member refuses
/// its own assignment and rejoins (it keeps running).
#[test]
fn a_classic_member_reads_forged_consumer_protocol_bytes_as_typed_errors() {
    let now = Instant::now();
    let versions = BrokerVersions::all();
    let config = GroupConfig::new("g")
        .with_protocol(GroupProtocol::Classic)
        .with_assignor(consumer_membership::machine::classic::assignor::Range)
        .with_seed(1);
    let mut m = ClassicMember::new(config, now).expect("config");
    m.subscribe(["t".to_string()], now).expect("subscribe");
    let own = Subscription::new(["t"]).encode();
    let mut leader_assignment = None;
    let mut events = Vec::new();
    for _ in 0..16 {
        let Some(out) = m.poll_request() else { break };
        let (api, version, body) = wire::build(&out.request, &versions).expect("build");
        let answer = match body {
            RequestBody::Kafka(RequestKind::FindCoordinator(_)) => ResponseKind::FindCoordinator(
                FindCoordinatorResponse::default().with_coordinators(vec![
                    Coordinator::default()
                        .with_key(s("g"))
                        .with_node_id(BrokerId(1))
                        .with_host(s("127.0.0.1"))
                        .with_port(9092),
                ]),
            ),
            RequestBody::Kafka(RequestKind::JoinGroup(_)) => ResponseKind::JoinGroup(
                JoinGroupResponse::default()
                    .with_generation_id(1)
                    .with_protocol_type(Some(s("consumer")))
                    .with_protocol_name(Some(s("range")))
                    .with_leader(s("me"))
                    .with_member_id(s("me"))
                    .with_members(vec![
                        JoinGroupResponseMember::default()
                            .with_member_id(s("me"))
                            .with_metadata(own.clone()),
                        JoinGroupResponseMember::default()
                            .with_member_id(s("forger"))
                            .with_metadata(forged_consumer_protocol(i32::MAX)),
                    ]),
            ),
            RequestBody::Kafka(RequestKind::Metadata(_)) => {
                ResponseKind::Metadata(MetadataResponse::default().with_topics(vec![
                    MetadataResponseTopic::default()
                        .with_name(Some(TopicName(s("t"))))
                        .with_topic_id(Uuid::from_u128(7))
                        .with_partitions(
                            (0..2)
                                .map(|p| {
                                    MetadataResponsePartition::default().with_partition_index(p)
                                })
                                .collect(),
                        ),
                ]))
            }
            RequestBody::Kafka(RequestKind::SyncGroup(sync)) => {
                leader_assignment = Some(sync.assignments.clone());
                ResponseKind::SyncGroup(
                    SyncGroupResponse::default()
                        .with_protocol_type(Some(s("consumer")))
                        .with_protocol_name(Some(s("range")))
                        .with_assignment(forged_consumer_protocol(i32::MAX)),
                )
            }
            other => panic!("unexpected request {other:?}"),
        };
        let frame = wire::encode_response(&answer.into(), api, version, 1).expect("encode");
        let response = wire::decode_response(frame.freeze().slice(4..), api, version);
        m.handle_response(out.id, response, now);
        while let Some(e) = m.poll_event() {
            events.push(e);
        }
    }
    // The leader assigned both partitions to itself and nothing to the member whose
    // subscription it could not read.
    let assignments = leader_assignment.expect("the leader sent SyncGroup");
    let of = |id: &str| {
        let a = assignments
            .iter()
            .find(|a| a.member_id.as_str() == id)
            .unwrap_or_else(|| panic!("no assignment for {id}"));
        Assignment::decode(&a.assignment)
            .expect("assignment")
            .partitions
    };
    assert_eq!(of("me").len(), 2);
    assert!(of("forger").is_empty());
    // Its own forged assignment is refused: the member keeps running and rejoins.
    assert_eq!(m.fatal_error(), None);
    assert!(
        events.iter().any(|e| matches!(
            e,
            consumer_membership::Event::StateChanged { reason, .. }
                if *reason == consumer_membership::Reason::InvalidAssignment
        )),
        "{events:?}"
    );
}

/// A broker that advertises StreamsGroupHeartbeat (API key 88) v0-1 and answers it with a
/// v1 answer whose `Status` array claims 2^32 - 2 elements.
async fn forging_streams_broker(listener: TcpListener) {
    let Ok((mut s, _)) = listener.accept().await else {
        return;
    };
    loop {
        let mut size = [0u8; 4];
        if s.read_exact(&mut size).await.is_err() {
            return;
        }
        let mut req = vec![0u8; i32::from_be_bytes(size) as usize];
        if s.read_exact(&mut req).await.is_err() {
            return;
        }
        let api = i16::from_be_bytes([req[0], req[1]]);
        let version = i16::from_be_bytes([req[2], req[3]]);
        let correlation_id = i32::from_be_bytes([req[4], req[5], req[6], req[7]]);
        let answer = if api == ApiKey::ApiVersions as i16 {
            let keys = [(ApiKey::ApiVersions as i16, 0, 4), (88, 0, 1)].map(|(k, lo, hi)| {
                ApiVersion::default()
                    .with_api_key(k)
                    .with_min_version(lo)
                    .with_max_version(hi)
            });
            let r = ApiVersionsResponse::default().with_api_keys(keys.to_vec());
            wire::encode_response(
                &ResponseKind::ApiVersions(r).into(),
                ApiKey::ApiVersions,
                version,
                correlation_id,
            )
            .expect("encode")
            .to_vec()
        } else {
            assert_eq!(
                (api, version),
                (88, 1),
                "the heartbeat at the negotiated version"
            );
            // Header v1 (tagged fields), throttle, error code, null error message, "" member
            // id, member epoch, heartbeat interval, task offset interval, acceptable recovery
            // lag, then the forged `Status` count.
            let body = b()
                .uv(0)
                .zeros(4 + 2)
                .uv(0)
                .uv(1)
                .zeros(4 * 3 + 8)
                .huge()
                .zeros(8);
            let mut f = correlation_id.to_be_bytes().to_vec();
            f.extend_from_slice(&body.0);
            let mut out = (f.len() as i32).to_be_bytes().to_vec();
            out.extend_from_slice(&f);
            out
        };
        if s.write_all(&answer).await.is_err() {
            return;
        }
    }
}

/// The streams-group answers are decoded by the crate's own generated decoders (kafka-protocol
/// 0.18.0 has no API key 88): a forged count in one is a typed error through `TcpTransport`.
#[tokio::test]
async fn a_forged_streams_group_heartbeat_answer_over_tcp_is_a_typed_error() {
    use consumer_membership::messages::StreamsGroupHeartbeatRequest;
    use consumer_membership::request::Api;

    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let transport = TcpTransport::new(ClientConfig::new(&addr.to_string()).expect("config"));
    let target = Target::Node(Broker {
        node_id: 1,
        host: addr.ip().to_string(),
        port: addr.port(),
    });
    let server = tokio::spawn(forging_streams_broker(listener));
    let request = Request::StreamsGroupHeartbeat {
        body: Box::new(StreamsGroupHeartbeatRequest::default().with_member_epoch(0)),
        versions: 0..=1,
    };
    let r = transport
        .send(target, request, Duration::from_secs(5))
        .await;
    server.abort();
    match r.as_ref().map_err(TransportError::root) {
        Err(TransportError::Decode {
            api,
            version: 1,
            reason,
        }) if *api == Api::STREAMS_GROUP_HEARTBEAT && reason.contains("compact array") => {
            println!("StreamsGroupHeartbeat v1: {reason}")
        }
        other => panic!("expected a typed decode error, got {other:?}"),
    }
}
