//! The wire floor of the rejoin-latency benchmark (bench/rejoin.py): the minimal request
//! sequence of each scenario, sent raw over one blocking TCP connection, with no client logic
//! (no ApiVersions unless `WIRE_FLOOR_API_VERSIONS` is set, no timers, no second connection:
//! versions are fixed and the coordinator of a single-node broker is the bootstrap broker).
//!
//! ```text
//! cargo bench --bench wire_floor -- SCENARIO --bootstrap HOST:PORT --topic T --reps N [--group G]
//! ```
//!
//! Scenarios (the letters of bench/rejoin.py):
//! - `classic-static-restart` (a): once, untimed, a static member joins (as leader it assigns
//!   every partition to itself) and goes away without LeaveGroup; then, timed, N times: connect,
//!   FindCoordinator, JoinGroup (empty member id, same instance id), SyncGroup until it returns
//!   a non-empty assignment, close the connection without LeaveGroup.
//! - `consumer-join` (b): timed, N times, each in a new group: connect, FindCoordinator with a
//!   Metadata request for the topic right behind it (the assignment names topics by id; an
//!   application gets them by name), ConsumerGroupHeartbeat epoch 0, repeated at once until the answer carries partitions;
//!   then, untimed, a leave (epoch -1).
//! - `consumer-static-restart` (c): timed, N times, one static member: connect,
//!   FindCoordinator and Metadata as in (b), ConsumerGroupHeartbeat epoch 0 with the instance id until it carries
//!   partitions; then, untimed, the static leave (epoch -2).
//!
//! `--no-setup` skips the untimed setup of (a) and (c), done by an earlier run with `--reps 0`:
//! bench/rejoin.py runs every timed repetition in a process of its own, as it does for the
//! clients, so that no repetition runs on code and allocations warmed up by the one before.
//!
//! Each repetition prints one JSON line `{"client":"floor","scenario":..,"rep":i,"ms":..}`;
//! the time runs from before `connect` to the answer that carries the assignment.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use consumer_membership::MemberId;
use consumer_membership::machine::TopicPartition;
use consumer_membership::machine::classic::subscription::{Assignment, Subscription};
use consumer_membership::request::{RequestBody, ResponseBody};
use consumer_membership::transport::wire;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ConsumerGroupHeartbeatRequest, FindCoordinatorRequest, GroupId,
    JoinGroupRequest, MetadataRequest, RequestKind, ResponseKind, SyncGroupRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

const FIND_COORDINATOR: i16 = 6;
const JOIN_GROUP: i16 = 9;
const SYNC_GROUP: i16 = 5;
const HEARTBEAT: i16 = 1;
const METADATA: i16 = 12;

/// One raw connection: requests go out one at a time, each answer is read before the next.
struct Conn {
    stream: TcpStream,
    correlation: i32,
}

impl Conn {
    fn open(addr: &str) -> Result<Self> {
        let stream = TcpStream::connect(addr).with_context(|| format!("connect {addr}"))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        let mut conn = Conn {
            stream,
            correlation: 0,
        };
        if std::env::var_os("WIRE_FLOOR_API_VERSIONS").is_some() {
            let body = ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str("wire-floor"))
                .with_client_software_version(StrBytes::from_static_str("0"));
            conn.call(ApiKey::ApiVersions, 4, RequestKind::ApiVersions(body))?;
        }
        Ok(conn)
    }

    fn call(&mut self, api: ApiKey, version: i16, body: RequestKind) -> Result<ResponseKind> {
        let correlation = self.send(api, version, body)?;
        self.recv(api, version, correlation)
    }

    /// Writes a request; its answer is read by [`recv`](Self::recv), in order.
    fn send(&mut self, api: ApiKey, version: i16, body: RequestKind) -> Result<i32> {
        self.correlation += 1;
        let body = RequestBody::Kafka(body);
        let frame = wire::encode_request(&body, api, version, self.correlation, "wire-floor")?;
        self.stream.write_all(&frame)?;
        Ok(self.correlation)
    }

    fn recv(&mut self, api: ApiKey, version: i16, correlation: i32) -> Result<ResponseKind> {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size)?;
        let size = usize::try_from(i32::from_be_bytes(size)).context("negative frame size")?;
        let mut buf = vec![0u8; size];
        self.stream.read_exact(&mut buf)?;
        if wire::peek_correlation_id(&buf) != Some(correlation) {
            bail!("answer to another request");
        }
        match wire::decode_response(Bytes::from(buf), api, version)?.body {
            ResponseBody::Kafka(body) => Ok(body),
            other => bail!("not a kafka-protocol answer: {other:?}"),
        }
    }

    /// FindCoordinator with a Metadata request for `topic` right behind it on the connection,
    /// both answers read: the KIP-848 assignment names topics by id, and reaches an application
    /// by name.
    fn find_coordinator_and_names(&mut self, group: &str, topic: &str) -> Result<()> {
        let f = self.send_find_coordinator(group)?;
        let m = self.send_metadata(topic)?;
        self.recv_find_coordinator(f)?;
        self.recv_topic(m, topic).map(drop)
    }

    fn find_coordinator(&mut self, group: &str) -> Result<()> {
        let f = self.send_find_coordinator(group)?;
        self.recv_find_coordinator(f)
    }

    fn send_find_coordinator(&mut self, group: &str) -> Result<i32> {
        let body = FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(vec![StrBytes::from_string(group.to_owned())]);
        self.send(
            ApiKey::FindCoordinator,
            FIND_COORDINATOR,
            RequestKind::FindCoordinator(body),
        )
    }

    fn recv_find_coordinator(&mut self, correlation: i32) -> Result<()> {
        let ResponseKind::FindCoordinator(r) =
            self.recv(ApiKey::FindCoordinator, FIND_COORDINATOR, correlation)?
        else {
            bail!("not a FindCoordinator answer");
        };
        match r.coordinators.first() {
            Some(c) if c.error_code == 0 => Ok(()),
            Some(c) => bail!("FindCoordinator error {}", c.error_code),
            None => bail!("FindCoordinator answered no coordinator"),
        }
    }

    /// Metadata for `topic`; its answer by [`recv_topic`](Self::recv_topic).
    fn send_metadata(&mut self, topic: &str) -> Result<i32> {
        let body = MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
                TopicName(StrBytes::from_string(topic.to_owned())),
            ))]));
        self.send(ApiKey::Metadata, METADATA, RequestKind::Metadata(body))
    }

    /// The topic of a Metadata answer, checked: no error, a topic id.
    fn recv_topic(&mut self, correlation: i32, topic: &str) -> Result<MetadataResponseTopic> {
        let ResponseKind::Metadata(r) = self.recv(ApiKey::Metadata, METADATA, correlation)? else {
            bail!("not a Metadata answer");
        };
        let t = r
            .topics
            .into_iter()
            .next()
            .context("no topic in Metadata")?;
        if t.error_code != 0 || t.topic_id.is_nil() {
            bail!(
                "Metadata error {} (topic id {}) for {topic}",
                t.error_code,
                t.topic_id
            );
        }
        Ok(t)
    }

    fn partitions(&mut self, topic: &str) -> Result<Vec<TopicPartition>> {
        let m = self.send_metadata(topic)?;
        let t = self.recv_topic(m, topic)?;
        Ok(t.partitions
            .iter()
            .map(|p| TopicPartition::new(topic, p.partition_index))
            .collect())
    }

    /// JoinGroup then SyncGroup as static member `instance`; returns the partitions SyncGroup
    /// assigned. A leader that must assign gives itself every partition of `topic` (only in
    /// the untimed first join: a static leader that rejoins a stable group is told to skip
    /// the assignment, KIP-814).
    fn classic_join(&mut self, group: &str, instance: &str, topic: &str) -> Result<usize> {
        let metadata = Subscription::new([topic]).encode();
        let join = JoinGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
            .with_session_timeout_ms(45_000)
            .with_rebalance_timeout_ms(300_000)
            .with_member_id(StrBytes::from_static_str(""))
            .with_group_instance_id(Some(StrBytes::from_string(instance.to_owned())))
            .with_protocol_type(StrBytes::from_static_str("consumer"))
            .with_protocols(vec![
                JoinGroupRequestProtocol::default()
                    .with_name(StrBytes::from_static_str("range"))
                    .with_metadata(metadata),
            ]);
        let ResponseKind::JoinGroup(j) =
            self.call(ApiKey::JoinGroup, JOIN_GROUP, RequestKind::JoinGroup(join))?
        else {
            bail!("not a JoinGroup answer");
        };
        if j.error_code != 0 {
            bail!("JoinGroup error {}", j.error_code);
        }
        let assignments = if j.leader == j.member_id && !j.skip_assignment {
            let own = Assignment {
                partitions: self.partitions(topic)?,
                user_data: None,
            };
            vec![
                SyncGroupRequestAssignment::default()
                    .with_member_id(j.member_id.clone())
                    .with_assignment(own.encode()),
            ]
        } else {
            Vec::new()
        };
        let sync = SyncGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
            .with_generation_id(j.generation_id)
            .with_member_id(j.member_id.clone())
            .with_group_instance_id(Some(StrBytes::from_string(instance.to_owned())))
            .with_protocol_type(Some(StrBytes::from_static_str("consumer")))
            .with_protocol_name(j.protocol_name.clone())
            .with_assignments(assignments);
        let ResponseKind::SyncGroup(s) =
            self.call(ApiKey::SyncGroup, SYNC_GROUP, RequestKind::SyncGroup(sync))?
        else {
            bail!("not a SyncGroup answer");
        };
        if s.error_code != 0 {
            bail!("SyncGroup error {}", s.error_code);
        }
        let assignment = Assignment::decode(&s.assignment)?;
        Ok(assignment.partitions.len())
    }

    /// ConsumerGroupHeartbeat at `epoch`; returns (member epoch, partitions assigned).
    fn heartbeat(
        &mut self,
        group: &str,
        member: &MemberId,
        instance: Option<&str>,
        epoch: i32,
        topic: &str,
    ) -> Result<(i32, usize)> {
        let mut body = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
            .with_member_id(StrBytes::from_string(member.to_string()))
            .with_member_epoch(epoch)
            .with_instance_id(instance.map(|i| StrBytes::from_string(i.to_owned())))
            .with_rebalance_timeout_ms(-1);
        if epoch == 0 {
            body = body
                .with_rebalance_timeout_ms(300_000)
                .with_subscribed_topic_names(Some(vec![TopicName(StrBytes::from_string(
                    topic.to_owned(),
                ))]))
                .with_topic_partitions(Some(Vec::new()));
        }
        let ResponseKind::ConsumerGroupHeartbeat(r) = self.call(
            ApiKey::ConsumerGroupHeartbeat,
            HEARTBEAT,
            RequestKind::ConsumerGroupHeartbeat(body),
        )?
        else {
            bail!("not a ConsumerGroupHeartbeat answer");
        };
        if r.error_code != 0 {
            bail!("ConsumerGroupHeartbeat error {}", r.error_code);
        }
        let partitions = r.assignment.as_ref().map_or(0, |a| {
            a.topic_partitions.iter().map(|t| t.partitions.len()).sum()
        });
        Ok((r.member_epoch, partitions))
    }
}

/// Sends epoch-0 heartbeats on a fresh connection until one carries partitions; returns the
/// connection, the epoch and the time since before `connect`.
fn consumer_join(
    bootstrap: &str,
    group: &str,
    member: &MemberId,
    instance: Option<&str>,
    topic: &str,
) -> Result<(Conn, i32, Duration)> {
    let start = Instant::now();
    let mut conn = Conn::open(bootstrap)?;
    conn.find_coordinator_and_names(group, topic)?;
    let (mut epoch, mut partitions) = conn.heartbeat(group, member, instance, 0, topic)?;
    // The first answer may come before the target assignment was computed: ask again at once,
    // as no client would (they wait the heartbeat interval).
    let mut tries = 0;
    while partitions == 0 {
        tries += 1;
        if tries > 10_000 {
            bail!("no assignment after {tries} heartbeats");
        }
        (epoch, partitions) = conn.heartbeat(group, member, instance, epoch, topic)?;
    }
    Ok((conn, epoch, start.elapsed()))
}

struct Args {
    scenario: String,
    bootstrap: String,
    topic: String,
    group: String,
    reps: u32,
    /// Skip the untimed setup of the static scenarios (it ran in an earlier process).
    no_setup: bool,
}

fn parse_args() -> Result<Args> {
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    let scenario = it.next().context(
        "usage: wire_floor SCENARIO --bootstrap HOST:PORT --topic T --reps N [--group G]",
    )?;
    let mut args = Args {
        scenario,
        bootstrap: std::env::var("KAFKA_BOOTSTRAP").unwrap_or_default(),
        topic: String::new(),
        group: format!("floor-{}", std::process::id()),
        reps: 20,
        no_setup: false,
    };
    while let Some(flag) = it.next() {
        if flag == "--no-setup" {
            args.no_setup = true;
            continue;
        }
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--bootstrap" => args.bootstrap = value,
            "--topic" => args.topic = value,
            "--group" => args.group = value,
            "--reps" => args.reps = value.parse().context("--reps")?,
            _ => bail!("unknown flag {flag}"),
        }
    }
    if args.bootstrap.is_empty() || args.topic.is_empty() {
        bail!("--bootstrap (or KAFKA_BOOTSTRAP) and --topic are required");
    }
    Ok(args)
}

fn report(scenario: &str, rep: u32, elapsed: Duration, partitions: usize) {
    println!(
        "{{\"client\":\"floor\",\"scenario\":\"{scenario}\",\"rep\":{rep},\"ms\":{:.3},\"partitions\":{partitions}}}",
        elapsed.as_secs_f64() * 1e3
    );
}

fn run(args: &Args) -> Result<()> {
    match args.scenario.as_str() {
        "classic-static-restart" => {
            let instance = "floor-static";
            if !args.no_setup {
                let mut first = Conn::open(&args.bootstrap)?;
                first.find_coordinator(&args.group)?;
                first.classic_join(&args.group, instance, &args.topic)?;
                drop(first); // gone without LeaveGroup
            }
            for rep in 0..args.reps {
                let start = Instant::now();
                let mut conn = Conn::open(&args.bootstrap)?;
                conn.find_coordinator(&args.group)?;
                let partitions = conn.classic_join(&args.group, instance, &args.topic)?;
                let elapsed = start.elapsed();
                if partitions == 0 {
                    bail!("rep {rep}: the restarted static member got no partitions");
                }
                report(&args.scenario, rep, elapsed, partitions);
            }
        }
        "consumer-join" => {
            for rep in 0..args.reps {
                let group = format!("{}-{rep}", args.group);
                let member = MemberId::generate();
                let (mut conn, _, elapsed) =
                    consumer_join(&args.bootstrap, &group, &member, None, &args.topic)?;
                report(&args.scenario, rep, elapsed, 1);
                conn.heartbeat(&group, &member, None, -1, &args.topic)?;
            }
        }
        "consumer-static-restart" => {
            let instance = "floor-static";
            let first = u32::from(args.no_setup);
            for rep in first..=args.reps {
                // A restarted process draws a new member id (KIP-1082) and keeps the instance id.
                let member = MemberId::generate();
                let (mut conn, _, elapsed) = consumer_join(
                    &args.bootstrap,
                    &args.group,
                    &member,
                    Some(instance),
                    &args.topic,
                )?;
                // The first join creates the static member; the others are restarts.
                if rep > 0 {
                    report(&args.scenario, rep - 1, elapsed, 1);
                }
                conn.heartbeat(&args.group, &member, Some(instance), -2, &args.topic)?;
            }
        }
        other => bail!(
            "unknown scenario {other} (classic-static-restart, consumer-join, consumer-static-restart)"
        ),
    }
    Ok(())
}

fn main() -> ExitCode {
    let result = parse_args().and_then(|args| run(&args));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wire_floor: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
