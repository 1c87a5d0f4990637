//! VerifiableConsumer-style benchmark peer on the `krafka` crate (0.28): the command line and
//! stdout JSON lines of Kafka's system-test consumer `org.apache.kafka.tools.VerifiableConsumer`
//! (the subset the rejoin-latency benchmark uses), plus `--members N`.
//!
//! ```text
//! CARGO_TARGET_DIR=target/bench-peers/krafka-target \
//!     cargo build --release --manifest-path bench/peers/krafka/Cargo.toml
//! target/bench-peers/krafka-target/release/krafka-verifiable-consumer \
//!     --bootstrap-server 127.0.0.1:9092 --topic t --group-id g \
//!     [--group-protocol classic|consumer] [--group-instance-id ID] [--session-timeout MS] \
//!     [--consumer.config FILE] [--members N] [--poll-timeout-ms MS]
//! ```
//!
//! Flags:
//!
//! - `--bootstrap-server`, `--topic`, `--group-id`: required.
//! - `--group-protocol classic|consumer`: default classic (krafka's default too);
//!   `consumer` is krafka's `GroupProtocol::Consumer` (KIP-848, the broker's default
//!   assignor unless `--group-remote-assignor`).
//! - `--group-instance-id ID`: static membership; with `--members N` > 1 member i uses `ID-i`.
//! - `--session-timeout MS`: classic protocol only (an error with `consumer`, as in Java).
//! - `--consumer.config FILE` / `--command-config FILE`: a Java `.properties` file; only
//!   `session.timeout.ms` and `heartbeat.interval.ms` are mapped (classic protocol only:
//!   with `consumer` the broker sets both), every other key is ignored. The command line
//!   wins over the file.
//! - `--members N`: N members of the group in this process, one `Kafka` client and one
//!   `Consumer` each, each polled by its own tokio task; every event line then carries
//!   `"member": i`.
//! - `--poll-timeout-ms MS` (extension, default 50): the timeout of each `Consumer::poll`.
//!   krafka applies a KIP-848 assignment that a background heartbeat delivered only at the
//!   start of the next `poll`, so with `--group-protocol consumer` this bounds the extra
//!   delay before `partitions_assigned`.
//! - `--max-messages`, `--reset-policy`, `--verbose`, `--enable-autocommit`,
//!   `--close-timeout`, `--assignment-strategy`: accepted and ignored (records are polled
//!   and dropped; auto commit stays off).
//!
//! Events, one JSON object per line, flushed, `"timestamp"` in ms since the epoch:
//! `startup_complete` (once, right before the first client connects: `Kafka::connect` talks to
//! the bootstrap broker; krafka joins the group in the first poll), `partitions_assigned` /
//! `partitions_revoked` with `"partitions":[{"topic","partition"}]` from krafka's
//! `ConsumerRebalanceListener` (`on_partitions_lost` is reported as revoked, like Java's
//! default; with KIP-848 / cooperative only the added / removed partitions, possibly none),
//! `shutdown_requested`, `shutdown_complete` (after every consumer closed with krafka's
//! default `close()`: a dynamic member leaves, a static member stays in the classic protocol
//! and leaves with epoch -2 in KIP-848).
//!
//! Exit status 0 after a close, 1 for argument or configuration errors.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use krafka::Kafka;
use krafka::consumer::{
    AutoOffsetReset, Consumer, ConsumerRebalanceListener, GroupProtocol, TopicPartition,
};

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Print one event line; `member` None leaves out `"member"`, `partitions` None leaves out
/// `"partitions"`.
fn emit(name: &str, member: Option<usize>, partitions: Option<&[TopicPartition]>) {
    let mut line = format!(
        "{{\"timestamp\":{},\"name\":{}",
        now_ms(),
        json_string(name)
    );
    if let Some(m) = member {
        line.push_str(&format!(",\"member\":{m}"));
    }
    if let Some(parts) = partitions {
        let mut parts: Vec<&TopicPartition> = parts.iter().collect();
        parts.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        let items: Vec<String> = parts
            .iter()
            .map(|tp| {
                format!(
                    "{{\"topic\":{},\"partition\":{}}}",
                    json_string(&tp.topic),
                    tp.partition
                )
            })
            .collect();
        line.push_str(&format!(",\"partitions\":[{}]", items.join(",")));
    }
    line.push_str("}\n");
    // One locked write + flush per line, so lines of concurrent members never interleave.
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(line.as_bytes());
    let _ = out.flush();
}

struct Listener {
    member: Option<usize>,
}

impl ConsumerRebalanceListener for Listener {
    async fn on_partitions_assigned(&self, partitions: &[TopicPartition]) {
        emit("partitions_assigned", self.member, Some(partitions));
    }
    async fn on_partitions_revoked(&self, partitions: &[TopicPartition]) {
        emit("partitions_revoked", self.member, Some(partitions));
    }
    async fn on_partitions_lost(&self, partitions: &[TopicPartition]) {
        emit("partitions_revoked", self.member, Some(partitions));
    }
}

const VALUED: &[&str] = &[
    "--bootstrap-server",
    "--topic",
    "--group-id",
    "--group-protocol",
    "--group-instance-id",
    "--session-timeout",
    "--consumer.config",
    "--command-config",
    "--members",
    "--poll-timeout-ms",
    "--max-messages",
    "--reset-policy",
    "--close-timeout",
    "--assignment-strategy",
    "--group-remote-assignor",
];

fn parse_args(argv: Vec<String>) -> Result<BTreeMap<String, String>, String> {
    let mut values = BTreeMap::new();
    let mut it = argv.into_iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
            _ => (arg.clone(), None),
        };
        match flag.as_str() {
            "-h" | "--help" => {
                println!("see the header of bench/peers/krafka/src/main.rs");
                std::process::exit(0);
            }
            "--verbose" | "--enable-autocommit" => {
                values.insert(flag, "true".into());
            }
            f if VALUED.contains(&f) => {
                let value = match inline {
                    Some(v) => v,
                    None => it
                        .next()
                        .ok_or_else(|| format!("argument {f}: expected one argument"))?,
                };
                values.insert(flag, value);
            }
            _ => return Err(format!("unrecognized argument '{arg}'")),
        }
    }
    for req in ["--bootstrap-server", "--topic", "--group-id"] {
        if !values.contains_key(req) {
            return Err(format!("argument {req} is required"));
        }
    }
    Ok(values)
}

fn read_properties(path: &str) -> Result<BTreeMap<String, String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let mut props = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        match line.find(['=', ':']) {
            Some(i) => props.insert(line[..i].trim().to_owned(), line[i + 1..].trim().to_owned()),
            None => props.insert(line.to_owned(), String::new()),
        };
    }
    Ok(props)
}

fn ms(key: &str, v: &str) -> Result<Duration, String> {
    v.trim()
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{key}: {v:?} is not a positive integer"))
}

struct Settings {
    bootstrap: String,
    topic: String,
    group_id: String,
    protocol: GroupProtocol,
    instance_id: Option<String>,
    remote_assignor: Option<String>,
    session_timeout: Option<Duration>,
    heartbeat_interval: Option<Duration>,
    members: usize,
    poll_timeout: Duration,
}

fn settings(args: BTreeMap<String, String>) -> Result<Settings, String> {
    let protocol = match args
        .get("--group-protocol")
        .map(|p| p.to_ascii_lowercase())
        .as_deref()
    {
        None | Some("classic") => GroupProtocol::Classic,
        Some("consumer") => GroupProtocol::Consumer,
        Some(p) => {
            return Err(format!(
                "argument --group-protocol: {p:?} is not one of classic, consumer"
            ));
        }
    };
    let mut props = BTreeMap::new();
    for key in ["--consumer.config", "--command-config"] {
        if let Some(path) = args.get(key) {
            props.extend(read_properties(path)?);
        }
    }
    if let Some(v) = args.get("--session-timeout") {
        if protocol == GroupProtocol::Consumer {
            return Err("--session-timeout is not supported with --group-protocol consumer".into());
        }
        props.insert("session.timeout.ms".into(), v.clone());
    }
    let (mut session_timeout, mut heartbeat_interval) = (None, None);
    for (key, slot) in [
        ("session.timeout.ms", &mut session_timeout),
        ("heartbeat.interval.ms", &mut heartbeat_interval),
    ] {
        if let Some(v) = props.get(key) {
            if protocol == GroupProtocol::Consumer {
                eprintln!(
                    "krafka peer: {key} ignored with the consumer protocol (the broker sets it)"
                );
            } else {
                *slot = Some(ms(key, v)?);
            }
        }
    }
    let members = match args.get("--members") {
        None => 1,
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| format!("argument --members: {v:?} must be a positive integer"))?,
    };
    let poll_timeout = match args.get("--poll-timeout-ms") {
        None => Duration::from_millis(50),
        Some(v) => ms("--poll-timeout-ms", v)?,
    };
    Ok(Settings {
        bootstrap: args["--bootstrap-server"].clone(),
        topic: args["--topic"].clone(),
        group_id: args["--group-id"].clone(),
        protocol,
        instance_id: args.get("--group-instance-id").cloned(),
        remote_assignor: args.get("--group-remote-assignor").cloned(),
        session_timeout,
        heartbeat_interval,
        members,
        poll_timeout,
    })
}

async fn build_member(s: &Settings, i: usize) -> Result<Consumer, String> {
    let tag = (s.members > 1).then_some(i);
    let kafka = Kafka::builder(s.bootstrap.clone())
        .client_id("krafka-verifiable-consumer")
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let mut builder = kafka
        .consumer(s.group_id.clone())
        .group_protocol(s.protocol)
        .enable_auto_commit(false)
        .auto_offset_reset(AutoOffsetReset::Earliest)
        .rebalance_listener(Listener { member: tag });
    if let Some(id) = &s.instance_id {
        builder = builder.group_instance_id(if s.members > 1 {
            format!("{id}-{i}")
        } else {
            id.clone()
        });
    }
    if let Some(a) = &s.remote_assignor {
        builder = builder.group_remote_assignor(a.clone());
    }
    if let Some(t) = s.session_timeout {
        builder = builder.session_timeout(t);
    }
    if let Some(t) = s.heartbeat_interval {
        builder = builder.heartbeat_interval(t);
    }
    let consumer = builder
        .build()
        .await
        .map_err(|e| format!("configuration: {e}"))?;
    consumer
        .subscribe([s.topic.as_str()])
        .await
        .map_err(|e| format!("subscribe: {e}"))?;
    Ok(consumer)
}

#[tokio::main]
async fn main() -> ExitCode {
    let s = match parse_args(std::env::args().skip(1).collect()).and_then(settings) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("krafka peer: error: {e}");
            return ExitCode::from(1);
        }
    };

    // `Kafka::connect` talks to the bootstrap broker: startup_complete goes out before the
    // first one, so the time runs from before the client's first request.
    emit("startup_complete", None, None);
    let mut consumers = Vec::with_capacity(s.members);
    for i in 0..s.members {
        match build_member(&s, i).await {
            Ok(c) => consumers.push(Arc::new(c)),
            Err(e) => {
                eprintln!("krafka peer: error: {e}");
                return ExitCode::from(1);
            }
        }
    }

    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("krafka peer: error: SIGTERM handler: {e}");
            return ExitCode::from(1);
        }
    };
    let stop = Arc::new(AtomicBool::new(false));

    let mut tasks = Vec::new();
    for c in &consumers {
        let (c, stop, timeout) = (c.clone(), stop.clone(), s.poll_timeout);
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Acquire) {
                match c.poll(timeout).await {
                    Ok(_) | Err(krafka::KrafkaError::Wakeup) => {}
                    Err(e) => {
                        eprintln!("krafka peer: poll: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }));
    }

    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    emit("shutdown_requested", None, None);
    stop.store(true, Ordering::Release);
    for c in &consumers {
        c.wakeup();
    }
    for t in tasks {
        let _ = t.await;
    }
    let closes = consumers.iter().map(|c| {
        let c = c.clone();
        tokio::spawn(async move {
            if let Err(e) = c.close().await {
                eprintln!("krafka peer: close: {e}");
            }
        })
    });
    for t in closes.collect::<Vec<_>>() {
        let _ = t.await;
    }
    emit("shutdown_complete", None, None);
    ExitCode::SUCCESS
}
