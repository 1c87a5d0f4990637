//! A drop-in for Kafka's system-test consumer `org.apache.kafka.tools.VerifiableConsumer`
//! (Kafka 4.4): the same flags and the same JSON lines on stdout, with this crate's
//! [`GroupMember`] for membership and a minimal fetch path (`examples/common/fetch.rs`).
//!
//! ```text
//! tests/kafka/with-broker.sh sh -c 'cargo run --example verifiable_consumer -- \
//!     --bootstrap-server "$KAFKA_BOOTSTRAP" --topic demo --group-id demo --max-messages 10'
//! ```
//!
//! Flags (as VerifiableConsumer's; `--flag value` or `--flag=value`):
//!
//! | flag | meaning |
//! |---|---|
//! | `--bootstrap-server HOST:PORT[,...]` | required |
//! | `--topic TOPIC` | required |
//! | `--group-id GROUP` | required |
//! | `--group-protocol classic\|consumer` | default classic (case-insensitive) |
//! | `--group-remote-assignor NAME` | consumer protocol only |
//! | `--group-instance-id ID` | static membership |
//! | `--max-messages N` | stop after N records (default -1: until SIGTERM / Ctrl-C) |
//! | `--session-timeout MS` | classic protocol only (the consumer protocol refuses it) |
//! | `--verbose` | one `record_data` line per record |
//! | `--enable-autocommit` | commit every `auto.commit.interval.ms` (5 s), silently |
//! | `--close-timeout MS` | bound on the close (default 30000) |
//! | `--reset-policy earliest\|latest\|none` | `auto.offset.reset` (default earliest) |
//! | `--assignment-strategy CLASS` | classic only: Java class names (`...RangeAssignor`, `...RoundRobinAssignor`, `...CooperativeStickyAssignor`) or this crate's names (`range`, `roundrobin`, `cooperative-sticky`); default RangeAssignor |
//! | `--command-config FILE` | a `.properties` file; command-line options override it |
//! | `--consumer.config FILE` | deprecated alias of `--command-config` (prints Java's notice) |
//! | `--members N` | extension: N members of the group in this process (default 1), see below |
//!
//! The properties file takes the keys of `consumer_membership::properties::KEYS` plus those the
//! example handles itself: `auto.commit.interval.ms`, `max.poll.records`, `fetch.max.wait.ms`,
//! `fetch.min.bytes`, `fetch.max.bytes`, `max.partition.fetch.bytes`; `enable.auto.commit`
//! and `auto.offset.reset` are accepted and overridden by the command line, as in Java;
//! `key.deserializer` / `value.deserializer` are accepted and ignored (records are read as
//! UTF-8 strings, as VerifiableConsumer's `StringDeserializer`). Any other key is an error.
//!
//! Events, one JSON object per line, `"timestamp"` (ms since the epoch) and `"name"` first,
//! fields as Java's Jackson output:
//!
//! - `startup_complete`: before subscribing;
//! - `partitions_assigned` / `partitions_revoked`: `"partitions":[{"topic","partition"}]`,
//!   what the member added / gave up (lost partitions are reported as revoked, like Java's
//!   default `onPartitionsLost`);
//! - `records_consumed`: one per poll batch (at most `max.poll.records`, 500):
//!   `"count"` and `"partitions":[{"topic","partition","count","minOffset","maxOffset"}]`;
//! - `record_data` (with `--verbose`): `"key"`, `"value"` (strings or null), `"topic"`,
//!   `"partition"`, `"offset"`;
//! - `offsets_committed` (without auto-commit): after each batch's commit,
//!   `"offsets":[{"topic","partition","offset"}]`, `"error"` (only on failure), `"success"`;
//! - `shutdown_requested`: SIGTERM or Ctrl-C received;
//! - `shutdown_complete`: after the member closed (default leave semantics: a dynamic member
//!   leaves, a static one stays).
//!
//! Extension (not in VerifiableConsumer): every event also carries `"timestamp_us"`, the same
//! instant in microseconds (the rejoin benchmark times sub-millisecond steps with it), after
//! `"name"`. And `member_state` on every state change of the member,
//! `{"timestamp","name":"member_state","member_id","generation","state","reason"}` with the
//! classic protocol, `"member_epoch"` instead of `"generation"` with the consumer protocol.
//!
//! Extension `--members N` (N > 1): N members run side by side in this process, each with its
//! own transports, as N consumers would; every event line then carries `"member":i` (0-based)
//! after `"name"`, and each member prints its own `startup_complete` and `shutdown_complete`.
//! `shutdown_requested` is printed once, without `"member"`. `--group-instance-id ID` gives
//! member i the instance id `ID-i`. `--max-messages` counts per member.
//!
//! Offsets: a partition starts at its committed offset, else per `--reset-policy` (`none`:
//! the consumer stops with an error, like Java's `NoOffsetForPartitionException`). Without
//! auto-commit each batch's offsets are committed right after it (as VerifiableConsumer's
//! `commitSync`); with auto-commit they are committed every `auto.commit.interval.ms`. Either
//! way, offsets consumed but not yet committed are committed before a revocation ticket is
//! handed back, and (auto-commit) before closing.
//!
//! Not reproduced: Java's JVM shutdown hook also prints `shutdown_requested` *after*
//! `shutdown_complete` when the consumer stops by itself (`--max-messages`); here it is printed
//! only for a signal, so `shutdown_complete` is always the last line. Compressed batches stop
//! the consumer with an error (no codecs built in). Exit status: 0 after a close (also after a
//! fatal error, as Java's), 1 for argument errors (with the usage on stderr) and configuration
//! errors.

#[path = "common/fetch.rs"]
mod fetch;
#[path = "common/shutdown.rs"]
mod shutdown;

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::io::Write;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use consumer_membership::ClientConfig;
use consumer_membership::config::GroupConfig;
use consumer_membership::driver::{GroupMember, MemberHandle};
use consumer_membership::machine::TopicPartition;
use consumer_membership::machine::events::{CloseOptions, CommitError, CommitOffset, Event};
use consumer_membership::properties;
use consumer_membership::transport::TcpTransport;
use fetch::{DataError, FetchOptions, Leaders, OFFSET_OUT_OF_RANGE, OffsetReset, Record};
use serde_json::Value;

// =============================================================================== arguments

const USAGE: &str =
    "usage: verifiable_consumer [-h] --topic TOPIC [--group-protocol GROUP-PROTOCOL]
                           [--group-remote-assignor GROUP-REMOTE-ASSIGNOR] --group-id GROUP-ID
                           [--group-instance-id GROUP-INSTANCE-ID] [--max-messages MAX-MESSAGES]
                           [--session-timeout TIMEOUT-MS] [--verbose] [--enable-autocommit]
                           [--close-timeout CLOSE-TIMEOUT-MS] [--reset-policy RESET-POLICY]
                           [--assignment-strategy ASSIGNMENT-STRATEGY]
                           [--consumer.config CONFIG-FILE] [--command-config CONFIG-FILE]
                           --bootstrap-server HOST1:PORT1[,HOST2:PORT2[...]]";

const HELP: &str = "
Consumes messages from a topic and emits consumer events (group rebalances, received
messages, offsets committed) as JSON objects to STDOUT, like Kafka's VerifiableConsumer.
See the header of examples/verifiable_consumer.rs for the flags, the events and the
`member_state` extension.";

const RANGE_ASSIGNOR: &str = "org.apache.kafka.clients.consumer.RangeAssignor";

/// `--group-protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Classic,
    Consumer,
}

/// `--reset-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reset {
    To(OffsetReset),
    None,
}

/// The flags. Every valued flag takes the next argument as its value even when it starts with
/// `-` (as `--max-messages -1` needs), and the last of a repeated flag wins. Usage, help and
/// the error messages are VerifiableConsumer's (argparse4j's), not clap's: see [`parse_args`].
#[derive(Debug, Clone, Parser)]
#[command(name = "verifiable_consumer", args_override_self = true)]
struct Args {
    #[arg(long = "bootstrap-server", allow_hyphen_values = true)]
    bootstrap: String,
    #[arg(long, allow_hyphen_values = true)]
    topic: String,
    #[arg(long = "group-id", allow_hyphen_values = true)]
    group_id: String,
    #[arg(long = "group-protocol", allow_hyphen_values = true, default_value = "classic",
          value_parser = protocol)]
    protocol: Protocol,
    #[arg(long = "group-remote-assignor", allow_hyphen_values = true)]
    remote_assignor: Option<String>,
    #[arg(long = "group-instance-id", allow_hyphen_values = true)]
    instance_id: Option<String>,
    #[arg(long = "max-messages", allow_hyphen_values = true, default_value = "-1",
          value_parser = integer)]
    max_messages: i32,
    #[arg(long = "session-timeout", allow_hyphen_values = true, value_parser = integer)]
    session_timeout: Option<i32>,
    #[arg(long)]
    verbose: bool,
    #[arg(long = "enable-autocommit")]
    autocommit: bool,
    #[arg(long = "close-timeout", allow_hyphen_values = true, default_value = "30000",
          value_parser = close_timeout)]
    close_timeout: i32,
    #[arg(long = "reset-policy", allow_hyphen_values = true, default_value = "earliest",
          value_parser = reset)]
    reset: Reset,
    #[arg(long = "assignment-strategy", allow_hyphen_values = true,
          default_value = RANGE_ASSIGNOR)]
    assignment_strategy: String,
    #[arg(long = "consumer.config", allow_hyphen_values = true)]
    consumer_config: Option<PathBuf>,
    #[arg(long = "command-config", allow_hyphen_values = true)]
    command_config: Option<PathBuf>,
    #[arg(long, allow_hyphen_values = true, default_value = "1", value_parser = members)]
    members: u32,
}

fn integer(v: &str) -> Result<i32, String> {
    v.trim()
        .parse::<i32>()
        .map_err(|_| format!("could not convert '{v}' to Integer"))
}

fn protocol(v: &str) -> Result<Protocol, String> {
    match v.to_ascii_lowercase().as_str() {
        "classic" => Ok(Protocol::Classic),
        "consumer" => Ok(Protocol::Consumer),
        p => Err(format!("{p:?} is not one of CLASSIC, CONSUMER")),
    }
}

fn reset(v: &str) -> Result<Reset, String> {
    match v.to_ascii_lowercase().as_str() {
        "earliest" => Ok(Reset::To(OffsetReset::Earliest)),
        "latest" => Ok(Reset::To(OffsetReset::Latest)),
        "none" => Ok(Reset::None),
        p => Err(format!(
            "{p:?} is not supported; use earliest, latest or none"
        )),
    }
}

fn close_timeout(v: &str) -> Result<i32, String> {
    match integer(v)? {
        ms if ms < 0 => Err(format!("{ms} must not be negative")),
        ms => Ok(ms),
    }
}

fn members(v: &str) -> Result<u32, String> {
    let n = integer(v)?;
    u32::try_from(n)
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| format!("{n} must be at least 1"))
}

/// How argument parsing ends when it does not produce [`Args`].
#[derive(Debug)]
enum ArgsExit {
    /// `-h`, or no arguments at all: help on stdout, status 0 (as argparse4j).
    Help,
    /// Usage and the error on stderr, status 1.
    Error(String),
}

/// Parses the flags (without the program name), with argparse4j's messages for what is wrong.
fn parse_args(raw: impl IntoIterator<Item = String>) -> Result<Args, ArgsExit> {
    let raw: Vec<String> = raw.into_iter().collect();
    if raw.is_empty() {
        return Err(ArgsExit::Help);
    }
    let program = std::iter::once("verifiable_consumer".to_owned());
    Args::try_parse_from(program.chain(raw.iter().cloned())).map_err(|e| {
        use clap::error::{ContextKind, ContextValue, ErrorKind};
        let context = |kind| match e.get(kind) {
            Some(ContextValue::String(s)) => s.clone(),
            Some(ContextValue::Strings(all)) => all.first().cloned().unwrap_or_default(),
            _ => String::new(),
        };
        // clap names a flag with its value placeholder: `--topic <TOPIC>`.
        let arg = context(ContextKind::InvalidArg);
        let flag = arg.split(' ').next().unwrap_or_default();
        ArgsExit::Error(match e.kind() {
            ErrorKind::DisplayHelp => return ArgsExit::Help,
            ErrorKind::MissingRequiredArgument => format!("argument {flag} is required"),
            ErrorKind::UnknownArgument => {
                // As given, `--bogus=3` included (clap names `--bogus`).
                let given = raw.iter().find(|r| {
                    r.strip_prefix(arg.as_str())
                        .is_some_and(|rest| rest.is_empty() || rest.starts_with('='))
                });
                format!("unrecognized arguments: '{}'", given.unwrap_or(&arg))
            }
            ErrorKind::InvalidValue => format!("argument {flag}: expected one argument"),
            ErrorKind::ValueValidation => match std::error::Error::source(&e) {
                Some(why) => format!("argument {flag}: {why}"),
                None => format!("argument {flag}: invalid value"),
            },
            ErrorKind::TooManyValues => format!(
                "argument {flag}: ignored explicit argument {:?}",
                context(ContextKind::InvalidValue)
            ),
            _ => e
                .render()
                .to_string()
                .trim_start_matches("error: ")
                .trim()
                .to_owned(),
        })
    })
}

// =============================================================================== configuration

/// Everything the consumer runs with.
#[derive(Debug, Clone)]
struct Settings {
    args: Args,
    client: ClientConfig,
    group: GroupConfig,
    auto_commit_interval: Duration,
    max_poll_records: usize,
    fetch: FetchOptions,
}

/// Keys of the properties file this example handles itself (the rest go to
/// `consumer_membership::properties::from_properties`).
const OWN_KEYS: &[&str] = &[
    "auto.commit.interval.ms",
    "max.poll.records",
    "fetch.max.wait.ms",
    "fetch.min.bytes",
    "fetch.max.bytes",
    "max.partition.fetch.bytes",
];
/// Keys the command line always overrides (VerifiableConsumer sets them unconditionally).
const OVERRIDDEN_KEYS: &[&str] = &["enable.auto.commit", "auto.offset.reset"];
/// Keys Java's VerifiableConsumer ignores (it passes its own deserializers).
const IGNORED_KEYS: &[&str] = &["key.deserializer", "value.deserializer"];

/// Map assignor class names (and this crate's names) to this crate's names.
fn assignor_name(strategy: &str) -> Result<String, String> {
    let mut names = Vec::new();
    for s in strategy.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let name = match s {
            "org.apache.kafka.clients.consumer.RangeAssignor" | "range" => "range",
            "org.apache.kafka.clients.consumer.RoundRobinAssignor" | "roundrobin" => "roundrobin",
            "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"
            | "cooperative-sticky" => "cooperative-sticky",
            other => {
                return Err(format!(
                    "--assignment-strategy {other:?} is not supported; use RangeAssignor, RoundRobinAssignor or CooperativeStickyAssignor (org.apache.kafka.clients.consumer.*)"
                ));
            }
        };
        names.push(name);
    }
    if names.is_empty() {
        return Err("--assignment-strategy is empty".into());
    }
    Ok(names.join(","))
}

fn settings(args: Args) -> Result<Settings, String> {
    let mut props = BTreeMap::new();
    match (&args.consumer_config, &args.command_config) {
        (Some(_), Some(_)) => {
            return Err(
                "Options --consumer.config and --command-config are mutually exclusive.".into(),
            );
        }
        (Some(path), None) => {
            // Java prints this notice on stdout, too.
            emit_line(
                "Option --consumer.config has been deprecated and will be removed in a future version. Use --command-config instead.",
            );
            props = read_properties(path)?;
        }
        (None, Some(path)) => props = read_properties(path)?,
        (None, None) => {}
    }

    let take_ms =
        |props: &mut BTreeMap<String, String>, key: &str| -> Result<Option<u64>, String> {
            props
                .remove(key)
                .map(|v| {
                    v.trim()
                        .parse::<u64>()
                        .map_err(|_| format!("{key}: {v:?} is not a non-negative integer"))
                })
                .transpose()
        };
    let auto_commit_interval = Duration::from_millis(
        take_ms(&mut props, "auto.commit.interval.ms")?
            .unwrap_or(5000)
            .max(1),
    );
    let max_poll_records = take_ms(&mut props, "max.poll.records")?.unwrap_or(500);
    if max_poll_records == 0 {
        return Err("max.poll.records: must be at least 1".into());
    }
    let mut fetch = FetchOptions::default();
    if let Some(ms) = take_ms(&mut props, "fetch.max.wait.ms")? {
        fetch.max_wait = Duration::from_millis(ms);
    }
    let int = |v: u64, key: &str| i32::try_from(v).map_err(|_| format!("{key}: {v} is too large"));
    if let Some(v) = take_ms(&mut props, "fetch.min.bytes")? {
        fetch.min_bytes = int(v, "fetch.min.bytes")?;
    }
    if let Some(v) = take_ms(&mut props, "fetch.max.bytes")? {
        fetch.max_bytes = int(v, "fetch.max.bytes")?;
    }
    if let Some(v) = take_ms(&mut props, "max.partition.fetch.bytes")? {
        fetch.partition_max_bytes = int(v, "max.partition.fetch.bytes")?;
    }
    debug_assert!(OWN_KEYS.iter().all(|k| !props.contains_key(*k)));
    for key in OVERRIDDEN_KEYS.iter().chain(IGNORED_KEYS) {
        props.remove(*key);
    }

    // What VerifiableConsumer.createFromArgs puts over the file.
    let mut set = |k: &str, v: String| {
        props.insert(k.to_owned(), v);
    };
    match args.protocol {
        Protocol::Consumer => {
            set("group.protocol", "consumer".into());
            if let Some(a) = &args.remote_assignor {
                set("group.remote.assignor", a.clone());
            }
        }
        Protocol::Classic => {
            set("group.protocol", "classic".into());
            set(
                "partition.assignment.strategy",
                assignor_name(&args.assignment_strategy)?,
            );
        }
    }
    if let Some(ms) = args.session_timeout {
        set("session.timeout.ms", ms.to_string());
    }
    set("group.id", args.group_id.clone());
    if let Some(id) = &args.instance_id {
        set("group.instance.id", id.clone());
    }
    set("bootstrap.servers", args.bootstrap.clone());

    let (client, group) = properties::from_properties(&props).map_err(|e| {
        if e.key == properties::UNKNOWN_KEY {
            format!(
                "{e} (this example also takes {})",
                OWN_KEYS
                    .iter()
                    .chain(OVERRIDDEN_KEYS)
                    .chain(IGNORED_KEYS)
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            e.to_string()
        }
    })?;
    fetch.request_timeout = client.request_timeout;
    Ok(Settings {
        args,
        client,
        group,
        auto_commit_interval,
        max_poll_records: usize::try_from(max_poll_records).unwrap_or(usize::MAX),
        fetch,
    })
}

fn read_properties(path: &std::path::Path) -> Result<BTreeMap<String, String>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    // Java's Properties.load reads ISO-8859-1; take UTF-8 when it is valid.
    let text = String::from_utf8(bytes)
        .unwrap_or_else(|e| e.into_bytes().into_iter().map(char::from).collect());
    properties::parse_properties(&text).map_err(|e| format!("{}: {e}", path.display()))
}

// =============================================================================== JSON output

tokio::task_local! {
    /// The index of the member whose events this task prints (`--members` > 1).
    static MEMBER: Option<u32>;
}

/// One JSON object, fields in insertion order (Java's `@JsonPropertyOrder`; a `serde_json::Map`
/// would sort them). Keys and values are written by serde_json.
struct Obj(Vec<(&'static str, Field)>);

enum Field {
    Value(Value),
    Objects(Vec<Obj>),
}

impl Obj {
    fn new() -> Self {
        Obj(Vec::new())
    }

    /// An event: `"timestamp"` (ms since the epoch, as Java's `System.currentTimeMillis()`) and
    /// `"name"` first, as Java's `@JsonPropertyOrder`; then `"timestamp_us"`; then `"member"`
    /// when the event comes from one of several members (`--members`).
    fn event(name: &str) -> Self {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let ms = i64::try_from(now.as_millis()).unwrap_or(i64::MAX);
        let us = i64::try_from(now.as_micros()).unwrap_or(i64::MAX);
        let o = Obj::new()
            .num("timestamp", ms)
            .str("name", name)
            .num("timestamp_us", us);
        match MEMBER.try_with(|m| *m).ok().flatten() {
            Some(i) => o.num("member", i),
            None => o,
        }
    }

    fn field(mut self, key: &'static str, value: Field) -> Self {
        self.0.push((key, value));
        self
    }

    fn str(self, key: &'static str, value: &str) -> Self {
        self.field(key, Field::Value(Value::from(value)))
    }

    fn opt_str(self, key: &'static str, value: Option<&str>) -> Self {
        self.field(key, Field::Value(Value::from(value)))
    }

    fn num(self, key: &'static str, value: impl Into<i64>) -> Self {
        self.field(key, Field::Value(Value::from(value.into())))
    }

    fn bool(self, key: &'static str, value: bool) -> Self {
        self.field(key, Field::Value(Value::from(value)))
    }

    fn arr(self, key: &'static str, items: impl IntoIterator<Item = Obj>) -> Self {
        self.field(key, Field::Objects(items.into_iter().collect()))
    }

    /// The object as one line of JSON.
    fn end(self) -> String {
        let fields: Vec<String> = self
            .0
            .into_iter()
            .map(|(key, value)| {
                let value = match value {
                    Field::Value(v) => v.to_string(),
                    Field::Objects(items) => {
                        let items: Vec<String> = items.into_iter().map(Obj::end).collect();
                        format!("[{}]", items.join(","))
                    }
                };
                format!("{}:{value}", Value::from(key))
            })
            .collect();
        jackson_hex(format!("{{{}}}", fields.join(",")))
    }

    fn emit(self) {
        emit_line(&self.end());
    }
}

/// serde_json escapes a control character as `\u001f`, Jackson as `\u001F`: the hex digits of
/// every `\u` escape in upper case, so that the lines match Java's byte for byte.
fn jackson_hex(json: String) -> String {
    if !json.contains("\\u") {
        return json;
    }
    let mut out = String::with_capacity(json.len());
    let mut chars = json.chars();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '\\' {
            match chars.next() {
                Some('u') => {
                    out.push('u');
                    out.extend(chars.by_ref().take(4).map(|h| h.to_ascii_uppercase()));
                }
                Some(escaped) => out.push(escaped),
                None => {}
            }
        }
    }
    out
}

/// Writes one line to stdout and flushes it (a closed stdout is ignored).
fn emit_line(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn partition_obj(tp: &TopicPartition) -> Obj {
    Obj::new()
        .str("topic", &tp.topic)
        .num("partition", tp.partition)
}

fn emit_partitions(name: &str, partitions: &[TopicPartition]) {
    Obj::event(name)
        .arr("partitions", partitions.iter().map(partition_obj))
        .emit();
}

fn emit_committed(offsets: &[CommitOffset], error: Option<&str>) {
    let mut o = Obj::event("offsets_committed").arr(
        "offsets",
        offsets
            .iter()
            .map(|c| partition_obj(&c.partition).num("offset", c.offset)),
    );
    if let Some(e) = error {
        o = o.str("error", e);
    }
    o.bool("success", error.is_none()).emit();
}

// =============================================================================== the consumer

/// Where a partition's next fetch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    /// Not known yet: the committed offset, else the reset policy.
    Unknown,
    /// Reset by policy (the fetch position was out of range).
    Reset,
    /// The next offset to fetch.
    At(i64),
}

#[derive(Debug, Clone)]
struct Owned {
    /// Bumped every time the partition is (re)assigned: answers for an older assignment are
    /// dropped.
    epoch: u64,
    position: Position,
}

/// What one fetch round found out; applied by [`Consumer::on_round`].
#[derive(Debug, Default)]
struct Round {
    leaders: Option<Arc<Leaders>>,
    refresh_metadata: bool,
    /// (partition, assignment epoch, position) resolved from committed offsets or ListOffsets.
    positions: Vec<(TopicPartition, u64, i64)>,
    /// What a fetch returned for a partition.
    fetched: Vec<FetchedPart>,
    /// (partition, assignment epoch, fetch offset) answered OFFSET_OUT_OF_RANGE.
    out_of_range: Vec<(TopicPartition, u64, i64)>,
    /// Partitions without a committed offset under `--reset-policy none`.
    no_offset: Vec<TopicPartition>,
    /// A condition that stops the consumer (e.g. a compressed batch).
    fatal: Option<String>,
    errors: Vec<String>,
}

/// One partition's share of a Fetch answer.
#[derive(Debug)]
struct FetchedPart {
    tp: TopicPartition,
    /// The assignment epoch the fetch was made for.
    epoch: u64,
    /// The fetch offset.
    from: i64,
    records: Vec<Record>,
    /// Where the next fetch starts (past control batches too).
    next_offset: Option<i64>,
}

type RoundFuture = Pin<Box<dyn Future<Output = Round> + Send>>;

/// The consumer's view of its assignment and progress.
struct Consumer {
    settings: Arc<Settings>,
    data: Arc<TcpTransport>,
    owned: BTreeMap<TopicPartition, Owned>,
    next_epoch: u64,
    leaders: Option<Arc<Leaders>>,
    refresh_metadata: bool,
    /// Consumed offsets (next offset) not yet known to be committed.
    uncommitted: BTreeMap<TopicPartition, i64>,
    consumed: i64,
}

/// Whether the main loop goes on.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    Stop,
}

impl Consumer {
    fn finished(&self) -> bool {
        let max = self.settings.args.max_messages;
        max >= 0 && self.consumed >= i64::from(max)
    }

    fn protocol_generation_key(&self) -> &'static str {
        match self.settings.args.protocol {
            Protocol::Classic => "generation",
            Protocol::Consumer => "member_epoch",
        }
    }

    /// Handles one member event.
    async fn on_event(&mut self, event: Event, member: &MemberHandle) -> Flow {
        match event {
            Event::Assigned { added, .. } => {
                emit_partitions("partitions_assigned", &added);
                for tp in added {
                    self.next_epoch += 1;
                    self.owned.insert(
                        tp.clone(),
                        Owned {
                            epoch: self.next_epoch,
                            position: Position::Unknown,
                        },
                    );
                    self.uncommitted.remove(&tp);
                }
            }
            Event::Revoking { partitions, ticket } => {
                if let Flow::Stop = self.commit_pending(Some(&partitions), member).await {
                    return Flow::Stop;
                }
                emit_partitions("partitions_revoked", &partitions);
                self.forget(&partitions);
                if let Err(e) = member.complete_revocation(ticket).await {
                    eprintln!("verifiable_consumer: revocation not accepted: {e}");
                }
            }
            Event::Revoked { partitions } => {
                emit_partitions("partitions_revoked", &partitions);
                self.forget(&partitions);
            }
            Event::Lost { partitions, reason } => {
                eprintln!(
                    "verifiable_consumer: lost {} partition(s): {reason}",
                    partitions.len()
                );
                emit_partitions("partitions_revoked", &partitions);
                self.forget(&partitions);
            }
            Event::StateChanged {
                to,
                reason,
                member_id,
                generation,
                ..
            } => {
                Obj::event("member_state")
                    .str("member_id", &member_id)
                    .num(self.protocol_generation_key(), generation)
                    .str("state", to.as_str())
                    .str("reason", reason.as_str())
                    .emit();
            }
            Event::Fatal(e) => {
                eprintln!(
                    "verifiable_consumer: Error during processing, terminating consumer process: {e}"
                );
                return Flow::Stop;
            }
            Event::Closed => return Flow::Stop,
            _ => {}
        }
        Flow::Continue
    }

    fn forget(&mut self, partitions: &[TopicPartition]) {
        for tp in partitions {
            self.owned.remove(tp);
            self.uncommitted.remove(tp);
        }
    }

    /// Commits consumed offsets not yet committed (of `only`, if given). Printed as
    /// `offsets_committed` unless auto-commit is on (Java prints only its own commitSync).
    async fn commit_pending(
        &mut self,
        only: Option<&[TopicPartition]>,
        member: &MemberHandle,
    ) -> Flow {
        let offsets: Vec<CommitOffset> = self
            .uncommitted
            .iter()
            .filter(|(tp, _)| only.is_none_or(|o| o.contains(tp)))
            .map(|(tp, &offset)| CommitOffset {
                partition: tp.clone(),
                offset,
                metadata: None,
            })
            .collect();
        if offsets.is_empty() {
            return Flow::Continue;
        }
        let print = !self.settings.args.autocommit;
        self.commit(offsets, print, member).await
    }

    async fn commit(
        &mut self,
        offsets: Vec<CommitOffset>,
        print: bool,
        member: &MemberHandle,
    ) -> Flow {
        let result = member.commit(offsets.clone()).await;
        match &result {
            Ok(()) => {
                for c in &offsets {
                    if self.uncommitted.get(&c.partition) == Some(&c.offset) {
                        self.uncommitted.remove(&c.partition);
                    }
                }
                if print {
                    emit_committed(&offsets, None);
                }
            }
            // As VerifiableConsumer.commitSync: a fenced static member stops without a line.
            Err(e @ CommitError::FencedInstanceId { .. }) => {
                eprintln!(
                    "verifiable_consumer: Error during processing, terminating consumer process: {e}"
                );
                return Flow::Stop;
            }
            Err(e) => {
                if print {
                    emit_committed(&offsets, Some(&e.to_string()));
                } else {
                    eprintln!("verifiable_consumer: auto-commit failed: {e}");
                }
            }
        }
        Flow::Continue
    }

    /// Starts a fetch round for the owned partitions (None when nothing is owned).
    fn start_round(&self, member: &MemberHandle) -> Option<RoundFuture> {
        if self.owned.is_empty() {
            return None;
        }
        let work: Vec<(TopicPartition, u64, Position)> = self
            .owned
            .iter()
            .map(|(tp, o)| (tp.clone(), o.epoch, o.position))
            .collect();
        let leaders = (!self.refresh_metadata)
            .then(|| self.leaders.clone())
            .flatten();
        Some(Box::pin(round(
            self.settings.clone(),
            self.data.clone(),
            member.clone(),
            leaders,
            work,
        )))
    }

    /// Applies what a fetch round found, and consumes its records.
    async fn on_round(&mut self, r: Round, member: &MemberHandle) -> Flow {
        if let Some(l) = r.leaders {
            self.leaders = Some(l);
            self.refresh_metadata = false;
        }
        if r.refresh_metadata {
            self.refresh_metadata = true;
        }
        for e in &r.errors {
            eprintln!("verifiable_consumer: {e}");
        }
        if let Some(e) = r.fatal {
            eprintln!(
                "verifiable_consumer: Error during processing, terminating consumer process: {e}"
            );
            return Flow::Stop;
        }
        for (tp, epoch, offset) in r.positions {
            if let Some(o) = self.owned.get_mut(&tp)
                && o.epoch == epoch
                && !matches!(o.position, Position::At(_))
            {
                o.position = Position::At(offset);
            }
        }
        let no_offset: Vec<&TopicPartition> = r
            .no_offset
            .iter()
            .filter(|tp| self.owned.contains_key(*tp))
            .collect();
        if !no_offset.is_empty() {
            eprintln!(
                "verifiable_consumer: Error during processing, terminating consumer process: Undefined offset with no reset policy for partitions: {no_offset:?}"
            );
            return Flow::Stop;
        }
        for (tp, epoch, offset) in r.out_of_range {
            if let Some(o) = self.owned.get_mut(&tp)
                && o.epoch == epoch
                && o.position == Position::At(offset)
            {
                eprintln!(
                    "verifiable_consumer: fetch position {offset} of {tp} is out of range; resetting by policy"
                );
                o.position = Position::Reset;
            }
        }
        // Records of partitions still owned under the same assignment, at the current position.
        let mut ready: VecDeque<(TopicPartition, VecDeque<Record>)> = VecDeque::new();
        for f in r.fetched {
            let Some(o) = self.owned.get_mut(&f.tp) else {
                continue;
            };
            if o.epoch != f.epoch || o.position != Position::At(f.from) {
                continue;
            }
            let next = f
                .records
                .last()
                .map(|r| r.offset + 1)
                .max(f.next_offset)
                .filter(|n| *n > f.from);
            if let Some(next) = next {
                o.position = Position::At(next);
            }
            if !f.records.is_empty() {
                ready.push_back((f.tp, f.records.into()));
            }
        }
        // Hand them out in polls of at most max.poll.records, as KafkaConsumer.poll does.
        while !ready.is_empty() && !self.finished() {
            let mut batch: Vec<(TopicPartition, Vec<Record>)> = Vec::new();
            let mut room = self.settings.max_poll_records;
            while room > 0 {
                let Some((tp, mut records)) = ready.pop_front() else {
                    break;
                };
                let n = records.len().min(room);
                let taken: Vec<Record> = records.drain(..n).collect();
                room -= n;
                if !records.is_empty() {
                    ready.push_front((tp.clone(), records));
                }
                batch.push((tp, taken));
            }
            if let Flow::Stop = self.poll_batch(batch, member).await {
                return Flow::Stop;
            }
        }
        Flow::Continue
    }

    /// One `poll()` result: VerifiableConsumer.onRecordsReceived, then its commitSync.
    async fn poll_batch(
        &mut self,
        batch: Vec<(TopicPartition, Vec<Record>)>,
        member: &MemberHandle,
    ) -> Flow {
        let count: usize = batch.iter().map(|(_, r)| r.len()).sum();
        let max = i64::from(self.settings.args.max_messages);
        let mut summaries = Vec::new();
        let mut offsets = Vec::new();
        for (tp, mut records) in batch {
            if max >= 0 {
                let left = usize::try_from(max - self.consumed).unwrap_or(0);
                records.truncate(left);
            }
            let (Some(first), Some(last)) = (records.first(), records.last()) else {
                continue;
            };
            let (min_offset, max_offset) = (first.offset, last.offset);
            offsets.push(CommitOffset {
                partition: tp.clone(),
                offset: max_offset + 1,
                metadata: None,
            });
            summaries.push(
                partition_obj(&tp)
                    .num("count", i64::try_from(records.len()).unwrap_or(i64::MAX))
                    .num("minOffset", min_offset)
                    .num("maxOffset", max_offset),
            );
            if self.settings.args.verbose {
                for r in &records {
                    Obj::event("record_data")
                        .opt_str("key", text(&r.key).as_deref())
                        .opt_str("value", text(&r.value).as_deref())
                        .str("topic", &tp.topic)
                        .num("partition", tp.partition)
                        .num("offset", r.offset)
                        .emit();
                }
            }
            self.consumed += i64::try_from(records.len()).unwrap_or(i64::MAX);
            self.uncommitted.insert(tp, max_offset + 1);
            if self.finished() {
                break;
            }
        }
        Obj::event("records_consumed")
            .num("count", i64::try_from(count).unwrap_or(i64::MAX))
            .arr("partitions", summaries)
            .emit();
        if self.settings.args.autocommit {
            return Flow::Continue;
        }
        if offsets.is_empty() {
            emit_committed(&offsets, None);
            return Flow::Continue;
        }
        self.commit(offsets, true, member).await
    }
}

/// A record's key or value as VerifiableConsumer's `StringDeserializer` reads it (UTF-8,
/// malformed sequences replaced).
fn text(bytes: &Option<bytes::Bytes>) -> Option<String> {
    bytes
        .as_ref()
        .map(|b| String::from_utf8_lossy(b).into_owned())
}

/// One fetch round, off the main loop: leaders (when unknown), start positions of partitions
/// without one (committed offset, else the reset policy), then one Fetch per leader.
async fn round(
    settings: Arc<Settings>,
    data: Arc<TcpTransport>,
    member: MemberHandle,
    leaders: Option<Arc<Leaders>>,
    work: Vec<(TopicPartition, u64, Position)>,
) -> Round {
    let mut out = Round::default();
    let timeout = settings.client.request_timeout;
    let backoff = settings.client.retry_backoff;
    let leaders = match leaders {
        Some(l) => l,
        None => match fetch::leaders(&*data, std::slice::from_ref(&settings.args.topic), timeout)
            .await
        {
            Ok(l) => {
                let l = Arc::new(l);
                out.leaders = Some(l.clone());
                l
            }
            Err(e) => {
                out.errors.push(format!("metadata: {e}"));
                out.refresh_metadata = true;
                tokio::time::sleep(backoff).await;
                return out;
            }
        },
    };

    // Start positions.
    let mut positions: Vec<(TopicPartition, u64, i64)> = work
        .iter()
        .filter_map(|(tp, epoch, p)| match p {
            Position::At(offset) => Some((tp.clone(), *epoch, *offset)),
            _ => None,
        })
        .collect();
    let unknown: Vec<TopicPartition> = work
        .iter()
        .filter(|(_, _, p)| *p == Position::Unknown)
        .map(|(tp, _, _)| tp.clone())
        .collect();
    let mut to_reset: Vec<TopicPartition> = work
        .iter()
        .filter(|(_, _, p)| *p == Position::Reset)
        .map(|(tp, _, _)| tp.clone())
        .collect();
    let epoch_of = |tp: &TopicPartition| {
        work.iter()
            .find(|(x, _, _)| x == tp)
            .map_or(0, |(_, e, _)| *e)
    };
    if !unknown.is_empty() {
        match member.committed(unknown.clone()).await {
            Ok(committed) => {
                for tp in unknown {
                    match committed.get(&tp).and_then(|c| c.offset) {
                        Some(offset) if offset >= 0 => {
                            let e = epoch_of(&tp);
                            out.positions.push((tp.clone(), e, offset));
                            positions.push((tp, e, offset));
                        }
                        _ => to_reset.push(tp),
                    }
                }
            }
            Err(e) => {
                out.errors
                    .push(format!("fetching committed offsets of {unknown:?}: {e}"));
                tokio::time::sleep(backoff).await;
                return out;
            }
        }
    }
    if !to_reset.is_empty() {
        match settings.args.reset {
            Reset::None => {
                out.no_offset = to_reset;
                return out;
            }
            Reset::To(policy) => {
                for (leader, tps) in by_leader(&leaders, to_reset, &mut out) {
                    match fetch::list_offsets(&*data, &leader, &tps, policy, timeout).await {
                        Ok(found) => {
                            for (tp, result) in found {
                                match result {
                                    Ok(offset) => {
                                        let e = epoch_of(&tp);
                                        out.positions.push((tp.clone(), e, offset));
                                        positions.push((tp, e, offset));
                                    }
                                    Err(e) => note(&mut out, "ListOffsets", e),
                                }
                            }
                        }
                        Err(e) => note(&mut out, "ListOffsets", e),
                    }
                }
            }
        }
    }

    // One Fetch per leader, concurrently.
    let offsets: BTreeMap<TopicPartition, (u64, i64)> = positions
        .into_iter()
        .map(|(tp, e, o)| (tp, (e, o)))
        .collect();
    let mut fetches = tokio::task::JoinSet::new();
    for (leader, tps) in by_leader(&leaders, offsets.keys().cloned().collect(), &mut out) {
        let request: Vec<(TopicPartition, i64)> = tps
            .into_iter()
            .map(|tp| {
                let o = offsets[&tp].1;
                (tp, o)
            })
            .collect();
        let (data, options) = (data.clone(), settings.fetch.clone());
        fetches.spawn(async move { fetch::fetch(&*data, &leader, &request, &options).await });
    }
    let mut fetched_any = false;
    while let Some(joined) = fetches.join_next().await {
        let answer = match joined {
            Ok(answer) => answer,
            Err(e) => {
                out.errors.push(format!("fetch task: {e}"));
                continue;
            }
        };
        match answer {
            Ok(partitions) => {
                fetched_any = true;
                for (tp, result) in partitions {
                    let Some(&(epoch, from)) = offsets.get(&tp) else {
                        continue;
                    };
                    match result {
                        Ok(f) => out.fetched.push(FetchedPart {
                            tp,
                            epoch,
                            from,
                            records: f.records,
                            next_offset: f.next_offset,
                        }),
                        Err(e) if e.code() == Some(OFFSET_OUT_OF_RANGE) => {
                            out.out_of_range.push((tp, epoch, from));
                        }
                        Err(e @ DataError::Compressed { .. }) => out.fatal = Some(e.to_string()),
                        Err(e) => note(&mut out, "Fetch", e),
                    }
                }
            }
            Err(e) => note(&mut out, "Fetch", e),
        }
    }
    if !fetched_any || !out.errors.is_empty() {
        tokio::time::sleep(backoff).await;
    }
    out
}

/// Groups `tps` by leader; partitions without a known leader ask for a metadata refresh.
fn by_leader(
    leaders: &Leaders,
    tps: Vec<TopicPartition>,
    out: &mut Round,
) -> Vec<(consumer_membership::request::Broker, Vec<TopicPartition>)> {
    let mut groups: BTreeMap<i32, (consumer_membership::request::Broker, Vec<TopicPartition>)> =
        BTreeMap::new();
    for tp in tps {
        match leaders.leader(&tp) {
            Ok(b) => groups
                .entry(b.node_id)
                .or_insert_with(|| (b.clone(), Vec::new()))
                .1
                .push(tp),
            Err(e) => note(out, "Metadata", e),
        }
    }
    groups.into_values().collect()
}

fn note(out: &mut Round, what: &str, e: DataError) {
    if e.needs_metadata() {
        out.refresh_metadata = true;
    }
    out.errors.push(format!("{what}: {e}"));
}

/// Resolves on `optional`'s output, or never when there is none.
async fn maybe<F: Future + Unpin>(optional: Option<&mut F>) -> F::Output {
    match optional {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

// =============================================================================== signals

use shutdown::Shutdown;

// =============================================================================== main

// One thread, as Java's poll loop: no cross-thread wake-ups on the rejoin path (measured
// 0.25-0.5 ms less from startup_complete to the assignment than the multi-thread runtime).
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(ArgsExit::Help) => {
            println!("{USAGE}\n{HELP}");
            return ExitCode::SUCCESS;
        }
        Err(ArgsExit::Error(e)) => {
            eprintln!("{USAGE}\nverifiable_consumer: error: {e}");
            return ExitCode::from(1);
        }
    };
    let settings = match settings(args) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            eprintln!("verifiable_consumer: error: {e}");
            return ExitCode::from(1);
        }
    };
    let mut shutdown = Shutdown::register();
    let members = settings.args.members;
    if members == 1 {
        run(settings, Stop::Signal(shutdown)).await;
        return ExitCode::SUCCESS;
    }
    // --members N: N members side by side; one signal stops them all.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..members {
        let mut own = Settings::clone(&settings);
        own.group.instance_id = own.group.instance_id.map(|id| format!("{id}-{i}"));
        let stop = Stop::Watch(stopped.clone());
        tasks.spawn(MEMBER.scope(Some(i), run(Arc::new(own), stop)));
    }
    tokio::select! {
        () = shutdown.requested() => {
            Obj::event("shutdown_requested").emit();
            let _ = stop.send(true);
        }
        () = async { while tasks.join_next().await.is_some() {} } => {}
    }
    while tasks.join_next().await.is_some() {}
    ExitCode::SUCCESS
}

/// What ends the main loop besides the consumer itself.
enum Stop {
    /// SIGTERM or Ctrl-C (one member): prints `shutdown_requested`.
    Signal(Shutdown),
    /// The process-wide signal, already reported (`--members` > 1).
    Watch(tokio::sync::watch::Receiver<bool>),
}

impl Stop {
    async fn requested(&mut self) {
        match self {
            Stop::Signal(s) => {
                s.requested().await;
                Obj::event("shutdown_requested").emit();
            }
            Stop::Watch(w) => {
                let _ = w.wait_for(|stop| *stop).await;
            }
        }
    }
}

async fn run(settings: Arc<Settings>, mut shutdown: Stop) {
    // One transport for the member, one for the data path: a fetch parked for
    // fetch.max.wait.ms must not hold up a heartbeat.
    let member_transport = Arc::new(TcpTransport::new(settings.client.clone()));
    let data = Arc::new(TcpTransport::new(settings.client.clone()));
    let mut member = match GroupMember::start(member_transport, settings.group.clone()) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("verifiable_consumer: error: {e}");
            return;
        }
    };
    let handle = member.handle();
    let mut consumer = Consumer {
        settings: settings.clone(),
        data,
        owned: BTreeMap::new(),
        next_epoch: 0,
        leaders: None,
        refresh_metadata: true,
        uncommitted: BTreeMap::new(),
        consumed: 0,
    };

    Obj::event("startup_complete").emit();
    let mut running = match member.subscribe([settings.args.topic.clone()]).await {
        Ok(()) => true,
        Err(e) => {
            eprintln!(
                "verifiable_consumer: Error during processing, terminating consumer process: {e}"
            );
            false
        }
    };
    let mut auto_commit = tokio::time::interval_at(
        tokio::time::Instant::now() + settings.auto_commit_interval,
        settings.auto_commit_interval,
    );
    auto_commit.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut pending: Option<RoundFuture> = None;
    while running && !consumer.finished() {
        if pending.is_none() {
            pending = consumer.start_round(&handle);
        }
        tokio::select! {
            () = shutdown.requested() => running = false,
            event = member.next_event() => match event {
                Some(event) => running = consumer.on_event(event, &handle).await == Flow::Continue,
                None => running = false,
            },
            round = maybe(pending.as_mut()) => {
                pending = None;
                running = consumer.on_round(round, &handle).await == Flow::Continue;
            }
            _ = auto_commit.tick(), if settings.args.autocommit => {
                running = consumer.commit_pending(None, &handle).await == Flow::Continue;
            }
        }
    }
    drop(pending);

    // Close: auto-commit what is left, close with the default leave semantics, report what the
    // close released, then shutdown_complete.
    let close = async {
        if settings.args.autocommit {
            consumer.commit_pending(None, &handle).await;
        }
        member.close(CloseOptions::Default).await;
        while let Some(event) = member.next_event().await {
            match event {
                Event::Closed => break,
                e @ (Event::Revoked { .. } | Event::Lost { .. } | Event::StateChanged { .. }) => {
                    consumer.on_event(e, &handle).await;
                }
                _ => {}
            }
        }
    };
    let limit = Duration::from_millis(u64::try_from(settings.args.close_timeout).unwrap_or(0));
    if tokio::time::timeout(limit, close).await.is_err() {
        eprintln!("verifiable_consumer: close did not finish within {limit:?}");
    }
    Obj::event("shutdown_complete").emit();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Result<Args, ArgsExit> {
        parse_args(s.iter().map(|s| s.to_string()))
    }

    #[test]
    fn flags_parse_like_verifiable_consumer() {
        let a = args(&[
            "--bootstrap-server",
            "h:1",
            "--topic=t",
            "--group-id",
            "g",
            "--group-protocol",
            "CONSUMER",
            "--max-messages",
            "10",
            "--verbose",
        ])
        .unwrap();
        assert_eq!(a.protocol, Protocol::Consumer);
        assert_eq!(a.max_messages, 10);
        assert!(a.verbose && !a.autocommit);
        assert_eq!(a.reset, Reset::To(OffsetReset::Earliest));
        assert!(matches!(args(&[]), Err(ArgsExit::Help)));
        assert!(matches!(args(&["-h"]), Err(ArgsExit::Help)));
        let a = args(&[
            "--bootstrap-server=h:1",
            "--topic",
            "t",
            "--group-id",
            "g",
            "--max-messages",
            "-1",
            "--members",
            "3",
            "--max-messages",
            "5",
        ])
        .unwrap();
        assert_eq!((a.max_messages, a.members, a.close_timeout), (5, 3, 30_000));
        assert_eq!(a.assignment_strategy, RANGE_ASSIGNOR);
        // What is wrong: `argument_errors_read_as_verifiable_consumer_s`.
    }

    #[test]
    fn argument_errors_read_as_verifiable_consumer_s() {
        let required = [
            "--bootstrap-server",
            "h:1",
            "--topic",
            "t",
            "--group-id",
            "g",
        ];
        let cases: &[(&[&str], &str)] = &[
            (&["--bogus"], "unrecognized arguments: '--bogus'"),
            (&["--bogus=3"], "unrecognized arguments: '--bogus=3'"),
            (&["--members"], "argument --members: expected one argument"),
            (
                &["--max-messages", "x"],
                "argument --max-messages: could not convert 'x' to Integer",
            ),
            (
                &["--group-protocol", "Streams"],
                "argument --group-protocol: \"streams\" is not one of CLASSIC, CONSUMER",
            ),
            (
                &["--reset-policy=any"],
                "argument --reset-policy: \"any\" is not supported; use earliest, latest or none",
            ),
            (
                &["--close-timeout", "-5"],
                "argument --close-timeout: -5 must not be negative",
            ),
            (
                &["--members", "0"],
                "argument --members: 0 must be at least 1",
            ),
            (
                &["--verbose=yes"],
                "argument --verbose: ignored explicit argument \"yes\"",
            ),
        ];
        let error = |a: &[&str]| match args(a) {
            Err(ArgsExit::Error(e)) => e,
            other => panic!("{a:?}: {other:?}"),
        };
        assert_eq!(
            error(&["--topic", "t"]),
            "argument --bootstrap-server is required"
        );
        for (extra, expected) in cases {
            assert_eq!(
                error(&[&required[..], extra].concat()),
                *expected,
                "{extra:?}"
            );
        }
    }

    #[test]
    fn json_is_escaped_like_jackson() {
        let line = Obj::new().str("key", "a\"b\\c\n\u{1}\u{1b}é/\\u00ab").end();
        assert_eq!(line, r#"{"key":"a\"b\\c\n\u0001\u001Bé/\\u00ab"}"#);
        let line = Obj::new()
            .str("name", "x")
            .opt_str("key", None)
            .arr("partitions", [partition_obj(&TopicPartition::new("t", 1))])
            .bool("success", true)
            .end();
        assert_eq!(
            line,
            r#"{"name":"x","key":null,"partitions":[{"topic":"t","partition":1}],"success":true}"#
        );
    }

    #[test]
    fn assignor_class_names_map_to_crate_names() {
        assert_eq!(assignor_name(RANGE_ASSIGNOR).unwrap(), "range");
        assert_eq!(
            assignor_name(
                "org.apache.kafka.clients.consumer.CooperativeStickyAssignor, roundrobin"
            )
            .unwrap(),
            "cooperative-sticky,roundrobin"
        );
        assert!(assignor_name("org.apache.kafka.clients.consumer.StickyAssignor").is_err());
    }
}
