//! The streams-group messages of `consumer_membership::messages` (StreamsGroupHeartbeat and
//! StreamsGroupDescribe, requests and responses, v0 and v1; StreamsGroupTopologyDescriptionUpdate,
//! KIP-1331, request and response, v0) against kafka-clients 4.4.0's own generated classes, byte
//! for byte and both ways.
//!
//! `tests/kafka/StreamsWireCheck.java` builds the same samples as [`sample`] with kafka-clients
//! (every field of the version set to a non-default value, every array with two entries, the
//! nullable fields set, and two unknown tagged fields, since these schemas tag no field),
//! prints its encodings, checks that its samples leave no field at its default, and parses the
//! Rust encodings it reads on stdin. It runs once per test process (one JVM, about 3 s) on the
//! jars `tests/kafka/peer.sh libs --version 4.4.0` fetches with Maven (cached after the first
//! run); no broker is needed. Checked here:
//! (a) our encoding equals kafka-clients' for each message and version;
//! (b) we decode kafka-clients' bytes into a value equal to our sample, with no byte left;
//! (c) kafka-clients decodes our bytes into an object equal to its sample, with no byte left;
//! and a field set at a version that lacks it is refused, or dropped when ignorable, on both
//! sides alike. A field missing or encoded differently on either side fails (a), and (b) or (c).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use bytes::{Bytes, BytesMut};
use consumer_membership::kafka_protocol::messages::{GroupId, TopicName};
use consumer_membership::kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use consumer_membership::messages::{
    StreamsGroupDescribeRequest, StreamsGroupDescribeResponse, StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatResponse, StreamsGroupTopologyDescriptionUpdateRequest,
    StreamsGroupTopologyDescriptionUpdateResponse, streams_group_describe_response as ds,
    streams_group_heartbeat_request as hb, streams_group_heartbeat_response as rs,
    streams_group_topology_description_update_request as up,
};

/// The Kafka release whose kafka-clients the samples are checked against.
const KAFKA_CLIENTS: &str = "4.4.0";
const VERSIONS: [i16; 2] = [0, 1];
/// StreamsGroupTopologyDescriptionUpdate has v0 only (Kafka 4.4).
const UPDATE_VERSIONS: [i16; 1] = [0];

/// One sample message, by schema name.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // eight short-lived values
enum Sample {
    HeartbeatRequest(StreamsGroupHeartbeatRequest),
    HeartbeatResponse(StreamsGroupHeartbeatResponse),
    DescribeRequest(StreamsGroupDescribeRequest),
    DescribeResponse(StreamsGroupDescribeResponse),
    UpdateRequest(StreamsGroupTopologyDescriptionUpdateRequest),
    UpdateResponse(StreamsGroupTopologyDescriptionUpdateResponse),
}

const NAMES: [&str; 6] = [
    "StreamsGroupHeartbeatRequest",
    "StreamsGroupHeartbeatResponse",
    "StreamsGroupDescribeRequest",
    "StreamsGroupDescribeResponse",
    "StreamsGroupTopologyDescriptionUpdateRequest",
    "StreamsGroupTopologyDescriptionUpdateResponse",
];

/// The versions of the message `name`.
fn versions_of(name: &str) -> &'static [i16] {
    if name.starts_with("StreamsGroupTopologyDescriptionUpdate") {
        &UPDATE_VERSIONS
    } else {
        &VERSIONS
    }
}

fn encode_body<T: Encodable>(m: &T, version: i16) -> Vec<u8> {
    let mut buf = BytesMut::new();
    m.encode(&mut buf, version).unwrap();
    assert_eq!(m.compute_size(version).unwrap(), buf.len(), "compute_size");
    buf.to_vec()
}

/// Decodes `bytes`, failing when bytes are left over.
fn decode_body<T: Decodable>(bytes: &[u8], version: i16) -> Result<T, String> {
    let mut buf = Bytes::copy_from_slice(bytes);
    let m = T::decode(&mut buf, version).map_err(|e| format!("{e:#}"))?;
    match buf.len() {
        0 => Ok(m),
        n => Err(format!("{n} bytes left over")),
    }
}

impl Sample {
    fn encode(&self, version: i16) -> Vec<u8> {
        match self {
            Sample::HeartbeatRequest(m) => encode_body(m, version),
            Sample::HeartbeatResponse(m) => encode_body(m, version),
            Sample::DescribeRequest(m) => encode_body(m, version),
            Sample::DescribeResponse(m) => encode_body(m, version),
            Sample::UpdateRequest(m) => encode_body(m, version),
            Sample::UpdateResponse(m) => encode_body(m, version),
        }
    }

    fn decode(name: &str, bytes: &[u8], version: i16) -> Result<Sample, String> {
        Ok(match name {
            "StreamsGroupHeartbeatRequest" => {
                Sample::HeartbeatRequest(decode_body(bytes, version)?)
            }
            "StreamsGroupHeartbeatResponse" => {
                Sample::HeartbeatResponse(decode_body(bytes, version)?)
            }
            "StreamsGroupDescribeRequest" => Sample::DescribeRequest(decode_body(bytes, version)?),
            "StreamsGroupDescribeResponse" => {
                Sample::DescribeResponse(decode_body(bytes, version)?)
            }
            "StreamsGroupTopologyDescriptionUpdateRequest" => {
                Sample::UpdateRequest(decode_body(bytes, version)?)
            }
            "StreamsGroupTopologyDescriptionUpdateResponse" => {
                Sample::UpdateResponse(decode_body(bytes, version)?)
            }
            other => panic!("unknown message {other}"),
        })
    }
}

// ---- the samples: tests/kafka/StreamsWireCheck.java builds the same, field for field ----

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn topic(v: &str) -> TopicName {
    TopicName(s(v))
}

fn topics(names: [&str; 2]) -> Vec<TopicName> {
    names.map(topic).to_vec()
}

fn strs(values: [&str; 2]) -> Vec<StrBytes> {
    values.map(s).to_vec()
}

/// Two tags no version of these schemas knows (none tags a field): a one-byte and a two-byte
/// varint tag, one of them empty.
fn unknown_tags() -> BTreeMap<i32, Bytes> {
    BTreeMap::from([(7, Bytes::from_static(&[1, 2, 3])), (300, Bytes::new())])
}

// The structs several schemas declare alike (each module has its own type): one builder each,
// written once for all of them.
macro_rules! key_value {
    ($m:ident, $k:expr, $v:expr) => {
        $m::KeyValue::default().with_key(s($k)).with_value(s($v))
    };
}

macro_rules! topic_info {
    ($m:ident, $name:expr, $n:expr) => {{
        let n: i32 = $n;
        $m::TopicInfo::default()
            .with_name(topic(&$name))
            .with_partitions(n * 3)
            .with_replication_factor(n as i16)
            .with_topic_configs(vec![
                key_value!($m, "cleanup.policy", "compact"),
                key_value!($m, "retention.ms", &(n * 1000).to_string()),
            ])
    }};
}

/// The fields the heartbeat's and the describe answer's `Subtopology` share.
macro_rules! subtopology {
    ($m:ident, $i:expr) => {{
        let i: i32 = $i;
        $m::Subtopology::default()
            .with_subtopology_id(s(&format!("sub-{i}")))
            .with_source_topics(topics([&format!("input-{i}-a"), &format!("input-{i}-b")]))
            .with_repartition_sink_topics(topics([
                &format!("app-rep-{i}-a"),
                &format!("app-rep-{i}-b"),
            ]))
            .with_state_changelog_topics(vec![
                topic_info!($m, format!("app-store-{i}-changelog"), 1),
                topic_info!($m, format!("app-agg-{i}-changelog"), 2),
            ])
            .with_repartition_source_topics(vec![
                topic_info!($m, format!("app-rep-{i}-src"), 3),
                topic_info!($m, format!("app-rep-{i}-src2"), 4),
            ])
    }};
}

macro_rules! tasks {
    ($m:ident, $sub:expr, $p:expr) => {{
        let p: i32 = $p;
        $m::TaskIds::default()
            .with_subtopology_id(s($sub))
            .with_partitions(vec![p, p + 1])
    }};
}

macro_rules! task_offset {
    ($m:ident, $sub:expr, $p:expr, $offset:expr) => {
        $m::TaskOffset::default()
            .with_subtopology_id(s($sub))
            .with_partition($p)
            .with_offset($offset)
    };
}

macro_rules! endpoint {
    ($m:ident, $host:expr, $port:expr) => {
        $m::Endpoint::default().with_host(s($host)).with_port($port)
    };
}

/// The sample of `name` at `version`: every field the version has is set, the others are at
/// their defaults.
fn sample(name: &str, version: i16) -> Sample {
    match name {
        "StreamsGroupHeartbeatRequest" => Sample::HeartbeatRequest(heartbeat_request()),
        "StreamsGroupHeartbeatResponse" => Sample::HeartbeatResponse(heartbeat_response(version)),
        "StreamsGroupDescribeRequest" => Sample::DescribeRequest(describe_request(version)),
        "StreamsGroupDescribeResponse" => Sample::DescribeResponse(describe_response(version)),
        "StreamsGroupTopologyDescriptionUpdateRequest" => Sample::UpdateRequest(update_request()),
        "StreamsGroupTopologyDescriptionUpdateResponse" => {
            Sample::UpdateResponse(update_response())
        }
        other => panic!("unknown message {other}"),
    }
}

/// The same at v0 and v1.
fn heartbeat_request() -> StreamsGroupHeartbeatRequest {
    StreamsGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s("streams-app")))
        .with_member_id(s("m-Zx0J1bQpO6Yl2w9sE3bA"))
        .with_member_epoch(7)
        .with_endpoint_information_epoch(3)
        .with_instance_id(Some(s("instance-1")))
        .with_rack_id(Some(s("rack-a")))
        .with_rebalance_timeout_ms(45_000)
        .with_topology(Some(
            hb::Topology::default()
                .with_epoch(2)
                .with_subtopologies(vec![hb_subtopology(0), hb_subtopology(1)]),
        ))
        .with_active_tasks(Some(vec![tasks!(hb, "0", 0), tasks!(hb, "1", 2)]))
        .with_standby_tasks(Some(vec![tasks!(hb, "0", 4), tasks!(hb, "1", 6)]))
        .with_warmup_tasks(Some(vec![tasks!(hb, "0", 8), tasks!(hb, "1", 10)]))
        .with_process_id(Some(s("9f1c2d3e-process")))
        .with_user_endpoint(Some(endpoint!(hb, "streams-host.example", 65_000)))
        .with_client_tags(Some(vec![
            key_value!(hb, "zone", "eu-1a"),
            key_value!(hb, "rack", "r7"),
        ]))
        .with_task_offsets(Some(vec![
            task_offset!(hb, "0", 1, 1_000),
            task_offset!(hb, "1", 2, 1 << 40),
        ]))
        .with_task_end_offsets(Some(vec![
            task_offset!(hb, "0", 1, 2_000),
            task_offset!(hb, "1", 2, (1 << 40) + 5),
        ]))
        .with_shutdown_application(true)
        .with_unknown_tagged_fields(unknown_tags())
}

fn hb_subtopology(i: i32) -> hb::Subtopology {
    let copartition = |a: i16, b: i16| {
        hb::CopartitionGroup::default()
            .with_source_topics(vec![a, b])
            .with_source_topic_regex(vec![b, a])
            .with_repartition_source_topics(vec![a, b])
    };
    subtopology!(hb, i)
        .with_source_topic_regex(strs([&format!("in-{i}-.*"), &format!("other-{i}-.+")]))
        .with_copartition_groups(vec![copartition(0, 1), copartition(1, 0)])
}

fn heartbeat_response(version: i16) -> StreamsGroupHeartbeatResponse {
    let status = |code, detail| {
        rs::Status::default()
            .with_status_code(code)
            .with_status_detail(s(detail))
    };
    let tp = |t, p: i32| {
        rs::TopicPartition::default()
            .with_topic(topic(t))
            .with_partitions(vec![p, p + 10])
    };
    let endpoint_partitions = |host, port, p| {
        rs::EndpointToPartitions::default()
            .with_user_endpoint(endpoint!(rs, host, port))
            .with_active_partitions(vec![tp("input-0-a", p), tp("input-1-a", p + 1)])
            .with_standby_partitions(vec![tp("input-0-b", p + 2), tp("input-1-b", p + 3)])
    };
    let r = StreamsGroupHeartbeatResponse::default()
        .with_throttle_time_ms(11)
        .with_error_code(25)
        .with_error_message(Some(s("unknown member")))
        .with_member_id(s("m-Zx0J1bQpO6Yl2w9sE3bA"))
        .with_member_epoch(8)
        .with_heartbeat_interval_ms(5_000)
        .with_task_offset_interval_ms(60_000)
        .with_status(Some(vec![
            status(1, "missing source topics: input-0-a"),
            status(6, "missing client tags: zone"),
        ]))
        .with_active_tasks(Some(vec![tasks!(rs, "0", 0), tasks!(rs, "1", 2)]))
        .with_standby_tasks(Some(vec![tasks!(rs, "0", 4), tasks!(rs, "1", 6)]))
        .with_warmup_tasks(Some(vec![tasks!(rs, "0", 8), tasks!(rs, "1", 10)]))
        .with_endpoint_information_epoch(4)
        .with_partitions_by_user_endpoint(Some(vec![
            endpoint_partitions("h1.example", 9092, 0),
            endpoint_partitions("h2.example", 65_535, 4),
        ]))
        .with_unknown_tagged_fields(unknown_tags());
    match version {
        0 => r.with_acceptable_recovery_lag_legacy(10_000),
        _ => r
            .with_acceptable_recovery_lag(1 << 33)
            .with_topology_description_required(true),
    }
}

fn describe_request(version: i16) -> StreamsGroupDescribeRequest {
    StreamsGroupDescribeRequest::default()
        .with_group_ids(vec![GroupId(s("streams-app")), GroupId(s("other-app"))])
        .with_include_authorized_operations(true)
        .with_include_topology_description(version >= 1)
        .with_unknown_tagged_fields(unknown_tags())
}

fn describe_response(version: i16) -> StreamsGroupDescribeResponse {
    StreamsGroupDescribeResponse::default()
        .with_throttle_time_ms(12)
        .with_groups(vec![ds_group(0, version), ds_group(1, version)])
        .with_unknown_tagged_fields(unknown_tags())
}

fn ds_group(i: i32, version: i16) -> ds::DescribedGroup {
    let g = ds::DescribedGroup::default()
        .with_error_code(69 + i as i16)
        .with_error_message(Some(s(&format!("group error {i}"))))
        .with_group_id(GroupId(s(&format!("group-{i}"))))
        .with_group_state(s("Stable"))
        .with_group_epoch(5 + i)
        .with_assignment_epoch(4 + i)
        .with_topology(Some(
            ds::Topology::default()
                .with_epoch(3 + i)
                .with_subtopologies(Some(vec![subtopology!(ds, 0), subtopology!(ds, 1)])),
        ))
        .with_members(vec![ds_member(2 * i), ds_member(2 * i + 1)])
        .with_authorized_operations(3_576 + i);
    if version == 0 {
        return g;
    }
    let node = |name: &str, node_type| {
        ds::TopologyDescriptionNode::default()
            .with_name(s(name))
            .with_node_type(node_type)
            .with_source_topics(topics([&format!("{name}-in-a"), &format!("{name}-in-b")]))
            .with_sink_topic(Some(topic(&format!("{name}-out"))))
            .with_stores(strs([
                &format!("{name}-store-a"),
                &format!("{name}-store-b"),
            ]))
            .with_successors(strs([&format!("{name}-next-a"), &format!("{name}-next-b")]))
    };
    let subtopology = |i: i32| {
        ds::TopologyDescriptionSubtopology::default()
            .with_subtopology_id(s(&format!("sub-{i}")))
            .with_nodes(vec![
                node(&format!("KSTREAM-SOURCE-{i}"), 1),
                node(&format!("KSTREAM-SINK-{i}"), 3),
            ])
    };
    let global_store = |i: i32| {
        ds::TopologyDescriptionGlobalStore::default()
            .with_source(node(&format!("KSTREAM-GLOBAL-SOURCE-{i}"), 1))
            .with_processor(node(&format!("KTABLE-SOURCE-{i}"), 2))
    };
    g.with_topology_description(Some(
        ds::TopologyDescription::default()
            .with_subtopologies(vec![subtopology(0), subtopology(1)])
            .with_global_stores(vec![global_store(0), global_store(1)]),
    ))
    .with_topology_description_status(3)
    .with_assignor_name(Some(s("sticky")))
}

fn ds_member(i: i32) -> ds::Member {
    let assignment = |p| {
        ds::Assignment::default()
            .with_active_tasks(vec![tasks!(ds, "0", p), tasks!(ds, "1", p + 2)])
            .with_standby_tasks(vec![tasks!(ds, "0", p + 4), tasks!(ds, "1", p + 6)])
            .with_warmup_tasks(vec![tasks!(ds, "0", p + 8), tasks!(ds, "1", p + 10)])
    };
    let offset = i64::from(i);
    ds::Member::default()
        .with_member_id(s(&format!("member-{i}")))
        .with_member_epoch(10 + i)
        .with_instance_id(Some(s(&format!("instance-{i}"))))
        .with_rack_id(Some(s(&format!("rack-{i}"))))
        .with_client_id(s(&format!("client-{i}")))
        .with_client_host(s(&format!("/10.0.0.{i}")))
        .with_topology_epoch(3)
        .with_process_id(s(&format!("process-{i}")))
        .with_user_endpoint(Some(endpoint!(ds, &format!("host-{i}"), 40_000 + i as u16)))
        .with_client_tags(vec![
            key_value!(ds, "zone", &format!("z{i}")),
            key_value!(ds, "rack", &format!("r{i}")),
        ])
        .with_task_offsets(vec![
            task_offset!(ds, "0", i + 1, 100 * offset + 1),
            task_offset!(ds, "1", i + 1, 1 << 35),
        ])
        .with_task_end_offsets(vec![
            task_offset!(ds, "0", i + 1, 200 * offset + 1),
            task_offset!(ds, "1", i + 1, (1 << 35) + 1),
        ])
        .with_assignment(assignment(i))
        .with_target_assignment(assignment(i + 20))
        .with_is_classic(true)
}

fn update_request() -> StreamsGroupTopologyDescriptionUpdateRequest {
    let node = |name: &str, node_type: i8| {
        up::TopologyDescriptionNode::default()
            .with_name(s(name))
            .with_node_type(node_type)
            .with_source_topics(topics([&format!("{name}-in-a"), &format!("{name}-in-b")]))
            .with_sink_topic(Some(topic(&format!("{name}-out"))))
            .with_stores(strs([
                &format!("{name}-store-a"),
                &format!("{name}-store-b"),
            ]))
            .with_successors(strs([&format!("{name}-next-a"), &format!("{name}-next-b")]))
    };
    let subtopology = |i: i32| {
        up::TopologyDescriptionSubtopology::default()
            .with_subtopology_id(s(&format!("sub-{i}")))
            .with_nodes(vec![
                node(&format!("KSTREAM-SOURCE-{i}"), 1),
                node(&format!("KSTREAM-SINK-{i}"), 3),
            ])
    };
    let global_store = |i: i32| {
        up::TopologyDescriptionGlobalStore::default()
            .with_source(node(&format!("KSTREAM-GLOBAL-SOURCE-{i}"), 1))
            .with_processor(node(&format!("KTABLE-SOURCE-{i}"), 2))
    };
    StreamsGroupTopologyDescriptionUpdateRequest::default()
        .with_group_id(GroupId(s("streams-app")))
        .with_member_id(s("member-0"))
        .with_topology_epoch(3)
        .with_topology_description(
            up::TopologyDescription::default()
                .with_subtopologies(vec![subtopology(0), subtopology(1)])
                .with_global_stores(vec![global_store(0), global_store(1)]),
        )
        .with_unknown_tagged_fields(unknown_tags())
}

fn update_response() -> StreamsGroupTopologyDescriptionUpdateResponse {
    StreamsGroupTopologyDescriptionUpdateResponse::default()
        .with_throttle_time_ms(12)
        .with_error_code(135)
        .with_error_message(Some(s("the plugin said no")))
        .with_unknown_tagged_fields(unknown_tags())
}

// ---- the Java side ----

/// What `StreamsWireCheck.java` printed, by (message, version).
struct JavaRun {
    encoded: BTreeMap<(String, i16), Vec<u8>>,
    coverage: BTreeMap<(String, i16), String>,
    decoded: BTreeMap<(String, i16), String>,
    lacking: BTreeMap<(String, i16), String>,
}

fn cases() -> impl Iterator<Item = (&'static str, i16)> {
    NAMES
        .into_iter()
        .flat_map(|name| versions_of(name).iter().map(move |v| (name, *v)))
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

fn from_hex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}

/// The jars of kafka-clients (and its dependencies) `tests/kafka/peer.sh` fetches.
fn kafka_clients_jars() -> PathBuf {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let script = repo.join("tests/kafka/peer.sh");
    let out = Command::new(&script)
        .args(["libs", "--version", KAFKA_CLIENTS])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} libs (needs Maven) failed: {}\n{stderr}",
        script.display(),
        out.status
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(
        stdout
            .lines()
            .last()
            .expect("peer.sh printed no directory")
            .trim(),
    )
}

/// Runs the Java program once per test process, handing it the Rust encodings.
fn java() -> &'static JavaRun {
    static RUN: OnceLock<JavaRun> = OnceLock::new();
    RUN.get_or_init(|| {
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let libs = kafka_clients_jars();
        let java = match (std::env::var_os("JAVA"), std::env::var_os("JAVA_HOME")) {
            (Some(j), _) if !j.is_empty() => PathBuf::from(j),
            (_, Some(h)) if !h.is_empty() => PathBuf::from(h).join("bin").join("java"),
            _ => PathBuf::from("java"),
        };
        let mut child = Command::new(&java)
            .arg("-cp")
            .arg(libs.join("*"))
            .arg(repo.join("tests/kafka/StreamsWireCheck.java"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("run {} (Java 17+): {e}", java.display()));
        let mut input = String::new();
        for (name, v) in cases() {
            let bytes = sample(name, v).encode(v);
            writeln!(input, "{name} {v} {}", to_hex(&bytes)).unwrap();
        }
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "StreamsWireCheck.java failed: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let mut run = JavaRun {
            encoded: BTreeMap::new(),
            coverage: BTreeMap::new(),
            decoded: BTreeMap::new(),
            lacking: BTreeMap::new(),
        };
        for line in stdout.lines() {
            let mut parts = line.splitn(4, ' ');
            let (Some(kind), Some(name), Some(v), rest) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                panic!("unexpected line from StreamsWireCheck.java: {line}");
            };
            let key = (name.to_owned(), v.parse().expect("version"));
            let rest = rest.unwrap_or_default().to_owned();
            match kind {
                "encoded" => run.encoded.insert(key, from_hex(&rest)),
                "coverage" => run.coverage.insert(key, rest).map(|_| Vec::new()),
                "decoded" => run.decoded.insert(key, rest).map(|_| Vec::new()),
                "lacking" => run.lacking.insert(key, rest).map(|_| Vec::new()),
                _ => panic!("unexpected line from StreamsWireCheck.java: {line}"),
            };
        }
        run
    })
}

/// Runs `check` on every (message, version) and fails with all the failures at once.
fn each_case(check: impl Fn(&'static str, i16) -> Result<(), String>) {
    let failures: Vec<String> = cases()
        .filter_map(|(name, v)| check(name, v).err().map(|e| format!("{name} v{v}: {e}")))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Fails unless StreamsWireCheck.java said "ok" on every (message, version) of `verdicts`.
fn expect_java_ok(verdicts: &BTreeMap<(String, i16), String>) {
    each_case(
        |name, v| match verdicts.get(&(name.to_owned(), v)).map(String::as_str) {
            Some("ok") => Ok(()),
            Some(other) => Err(other.to_owned()),
            None => Err("no line from StreamsWireCheck.java".to_owned()),
        },
    );
}

/// kafka-clients' encoding of the sample.
fn java_encoding(name: &str, v: i16) -> Result<&'static [u8], String> {
    java()
        .encoded
        .get(&(name.to_owned(), v))
        .map(Vec::as_slice)
        .ok_or_else(|| "kafka-clients printed no encoding".to_owned())
}

#[test]
fn kafka_clients_samples_leave_no_field_at_its_default() {
    expect_java_ok(&java().coverage);
}

#[test]
fn rust_encodes_every_sample_as_kafka_clients_does() {
    each_case(|name, v| {
        let ours = sample(name, v).encode(v);
        let theirs = java_encoding(name, v)?;
        if ours == theirs {
            return Ok(());
        }
        let at = ours.iter().zip(theirs).take_while(|(a, b)| a == b).count();
        Err(format!(
            "first difference at byte {at} of {} (ours) / {} (kafka-clients)\n  ours:          {}\n  kafka-clients: {}",
            ours.len(),
            theirs.len(),
            to_hex(&ours[at..]),
            to_hex(&theirs[at..]),
        ))
    });
}

#[test]
fn rust_decodes_kafka_clients_bytes_into_its_samples() {
    each_case(|name, v| {
        let decoded = Sample::decode(name, java_encoding(name, v)?, v)?;
        let want = sample(name, v);
        if decoded == want {
            return Ok(());
        }
        // The first line where the two differ, with the lines above it for the path.
        let (got, want) = (format!("{decoded:#?}"), format!("{want:#?}"));
        let (got, want): (Vec<_>, Vec<_>) = (got.lines().collect(), want.lines().collect());
        let at = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
        let context = got[at.saturating_sub(6)..at].join("\n");
        Err(format!(
            "decoded differs from the sample:\n{context}\n  decoded: {}\n  sample:  {}",
            got.get(at).unwrap_or(&"(end)"),
            want.get(at).unwrap_or(&"(end)"),
        ))
    });
}

#[test]
fn kafka_clients_decodes_rust_bytes_into_its_samples() {
    expect_java_ok(&java().decoded);
}

/// What encoding `set` at `version` does with the one field it sets that the version lacks, as
/// StreamsWireCheck.java says it: "refused", "dropped" (an ignorable field, written as if at its
/// default) or "written".
fn lacking<T: Encodable + Default>(set: T, version: i16) -> &'static str {
    let mut buf = BytesMut::new();
    match set.encode(&mut buf, version) {
        Err(_) => "refused",
        Ok(()) if buf.to_vec() == encode_body(&T::default(), version) => "dropped",
        Ok(()) => "written",
    }
}

/// Fields a version lacks, as kafka-clients treats them: a non-ignorable one set to a
/// non-default value is refused (Java: UnsupportedVersionException), an ignorable one is left
/// out (AcceptableRecoveryLag, v1+, "ignorable": true).
#[test]
fn fields_a_version_lacks_are_treated_as_kafka_clients_does() {
    let ours = [
        (
            "StreamsGroupHeartbeatResponse.topologyDescriptionRequired",
            0,
            lacking(
                StreamsGroupHeartbeatResponse::default().with_topology_description_required(true),
                0,
            ),
        ),
        (
            "StreamsGroupHeartbeatResponse.acceptableRecoveryLagLegacy",
            1,
            lacking(
                StreamsGroupHeartbeatResponse::default().with_acceptable_recovery_lag_legacy(1),
                1,
            ),
        ),
        (
            "StreamsGroupHeartbeatResponse.acceptableRecoveryLag",
            0,
            lacking(
                StreamsGroupHeartbeatResponse::default().with_acceptable_recovery_lag(5),
                0,
            ),
        ),
        (
            "StreamsGroupDescribeRequest.includeTopologyDescription",
            0,
            lacking(
                StreamsGroupDescribeRequest::default().with_include_topology_description(true),
                0,
            ),
        ),
    ];
    let ours: BTreeMap<(String, i16), String> = ours
        .into_iter()
        .map(|(field, v, what)| ((field.to_owned(), v), what.to_owned()))
        .collect();
    assert_eq!(ours, java().lacking);
    // And what that is: only the ignorable field is dropped.
    let dropped: Vec<_> = ours.iter().filter(|(_, w)| *w == "dropped").collect();
    assert_eq!(dropped.len(), 1, "{ours:?}");
    assert!(
        dropped[0].0.0.ends_with(".acceptableRecoveryLag"),
        "{ours:?}"
    );
}

/// A forged array count in an answer is a decode error, never an allocation of that size.
#[test]
fn forged_array_counts_are_decode_errors() {
    // StreamsGroupDescribeResponse: throttle time, then a compact array claiming 2^32 - 2 groups.
    let forged = [0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0];
    for v in VERSIONS {
        let r = decode_body::<StreamsGroupDescribeResponse>(&forged, v);
        assert!(r.is_err(), "{r:?}");
    }
    // And cut short anywhere: an error, not a panic.
    let full = sample("StreamsGroupHeartbeatResponse", 1).encode(1);
    for cut in 0..full.len() {
        assert!(decode_body::<StreamsGroupHeartbeatResponse>(&full[..cut], 1).is_err());
    }
    let full = sample("StreamsGroupTopologyDescriptionUpdateResponse", 0).encode(0);
    for cut in 0..full.len() {
        let r = decode_body::<StreamsGroupTopologyDescriptionUpdateResponse>(&full[..cut], 0);
        assert!(r.is_err(), "{r:?}");
    }
    // A pushed description (what a broker decodes) claiming 2^32 - 2 subtopologies: group id,
    // member id, topology epoch, then the forged count.
    let forged = [
        2, b'g', 2, b'm', 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f, 0,
    ];
    let r = decode_body::<StreamsGroupTopologyDescriptionUpdateRequest>(&forged, 0);
    assert!(r.is_err(), "{r:?}");
}
